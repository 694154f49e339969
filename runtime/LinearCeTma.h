// The TMA tensor map of the fused loss's Hopper forward (kernels_templates/linear_ce_fwd.cuh,
// CeFwdMaps): the kept rows of E, packed [n_kept, dim] by the runtime, 2-D over (dim, n_kept)
// innermost first, loaded in boxes of 64 columns (128 bytes, the swizzle span) by 256 rows (the
// forward's row tile) with 128-byte swizzle, the layout load_kmajor writes. Positions past the
// extent read as zero.
//
// Header-only like runtime/AttentionTma.h, so the standalone harness
// (tests/gpu/linear_ce_harness.cu) encodes the map exactly as the runtime does.
#pragma once

#include <cstdint>

#include "runtime/AttentionTma.h"

namespace tilejit {

inline constexpr int kCeFwdTmaRows = 256;  // tilejit_ce::kFwdRows

// `data`: [rows, dim] with rows `dim` elements apart (dim a positive multiple of 8); `f16` picks
// the element type (else bf16). An empty extent (no kept row) is encoded as 1: never loaded.
inline TiledTensorMapArgs ce_hidden_tensor_map_args(const void* data, int64_t rows, int64_t dim,
                                                    bool f16) {
  TiledTensorMapArgs a;
  a.type = f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  a.rank = 2;
  a.address = const_cast<void*>(data);  // only read through the map
  a.dims[0] = static_cast<cuuint64_t>(dim);
  a.dims[1] = static_cast<cuuint64_t>(rows > 0 ? rows : 1);
  a.strides[0] = static_cast<cuuint64_t>(dim) * 2;
  a.box[0] = 64;
  a.box[1] = kCeFwdTmaRows;
  return a;
}

}  // namespace tilejit
