// The TMA tensor maps of the fused loss's Hopper forward (kernels_templates/linear_ce_fwd.cuh,
// CeFwdMaps): the kept rows of E, packed [n_kept, dim] by the runtime, and each segment's weight
// rows [size, dim]; 2-D over (dim, rows) innermost first, loaded in boxes of 64 columns (128
// bytes, the swizzle span) by the operand tile's rows (256 kept rows, 128 vocabulary positions)
// with 128-byte swizzle, the layout load_kmajor writes. Positions past the extent read as zero.
//
// Header-only like runtime/AttentionTma.h, so the standalone harness
// (tests/gpu/linear_ce_harness.cu) encodes the maps exactly as the runtime does.
#pragma once

#include <cstdint>

#include "runtime/AttentionTma.h"

namespace tilejit {

inline constexpr int kCeFwdTmaRows = 256;     // tilejit_ce::kFwdRows: the hidden tile's rows
inline constexpr int kCeWeightTmaRows = 128;  // tilejit_ce::kTileIds: a vocabulary tile's rows

// `data`: [rows, dim] with rows `row_stride` elements apart (both multiples of 8, 16-byte
// aligned); `f16` picks the element type (else bf16). An empty extent is encoded as 1 (never
// loaded).
inline TiledTensorMapArgs ce_operand_tensor_map_args(const void* data, int64_t rows, int64_t dim,
                                                     int64_t row_stride, int box_rows, bool f16) {
  TiledTensorMapArgs a;
  a.type = f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  a.rank = 2;
  a.address = const_cast<void*>(data);  // only read through the map
  a.dims[0] = static_cast<cuuint64_t>(dim);
  a.dims[1] = static_cast<cuuint64_t>(rows > 0 ? rows : 1);
  a.strides[0] = static_cast<cuuint64_t>(row_stride) * 2;
  a.box[0] = 64;
  a.box[1] = static_cast<cuuint32_t>(box_rows);
  return a;
}

// The compacted kept rows of E (row stride dim).
inline TiledTensorMapArgs ce_hidden_tensor_map_args(const void* data, int64_t rows, int64_t dim,
                                                    bool f16) {
  return ce_operand_tensor_map_args(data, rows, dim, dim, kCeFwdTmaRows, f16);
}

// The KL kernels' (tilejit_ce::CeKlMaps): the compacted kept rows of E or of the teacher's
// hidden states, in boxes of their 128-row tile, or of its slice of 128 / cluster rows where a
// cluster of `cluster` CTAs loads the tile together (the KL forward's split_cluster).
inline constexpr int kCeKlTmaRows = 128;  // tilejit_ce::kKlRows
inline TiledTensorMapArgs ce_kl_hidden_tensor_map_args(const void* data, int64_t rows,
                                                       int64_t dim, int64_t row_stride, bool f16,
                                                       int cluster = 1) {
  return ce_operand_tensor_map_args(data, rows, dim, row_stride, kCeKlTmaRows / cluster, f16);
}

// A segment's weight rows (a vocabulary tile's box), or the forward's copy of them in the
// segment's visiting order (runtime/LinearCe.h; without it such a segment is gathered with
// cp.async).
inline TiledTensorMapArgs ce_weight_tensor_map_args(const void* data, int64_t rows, int64_t dim,
                                                    int64_t row_stride, bool f16) {
  return ce_operand_tensor_map_args(data, rows, dim, row_stride, kCeWeightTmaRows, f16);
}

// The products' maps (kernels_templates/linear_ce_products.cuh, CeBwdMaps): 64 x 64 boxes of
// G's blocks, of the kept rows of E and of each segment's weights.
inline constexpr int kCeProductTmaRows = 64;

}  // namespace tilejit
