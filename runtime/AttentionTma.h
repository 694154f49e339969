// The TMA tensor maps of the Hopper attention kernels (kernels_templates/attention_fwd_sm90.cuh,
// attention_bwd_sm90.cuh); those of the operands (Q, K, V, dO), 4-D over (d, s, h, b) innermost first, loaded in 64 x 64 boxes with 128-byte
// swizzle (the shared-memory layout the kernel's wgmma descriptors read). Positions past the
// tensor's extent read as zero, which is what the kernel relies on for partial tiles.
//
// Header-only and free of tilejit's other headers, so the standalone GPU harness
// (tests/gpu/attention_harness.cu) encodes its maps exactly as the runtime does: fill the
// arguments here, then hand them to the driver's cuTensorMapEncodeTiled (runtime/Driver.h) or to
// the entry point the CUDA runtime returns.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace tilejit {

// The arguments of cuTensorMapEncodeTiled after the map itself.
struct TiledTensorMapArgs {
  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  cuuint32_t rank = 4;
  void* address = nullptr;
  cuuint64_t dims[4] = {};
  cuuint64_t strides[3] = {};  // bytes, of dims 1..3
  cuuint32_t box[4] = {};
  cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;  // zeros

  // encode(map, type, rank, address, dims, strides, box, element_strides, interleave, swizzle,
  // l2_promotion, oob_fill): cuTensorMapEncodeTiled's signature.
  template <class Encode>
  auto encode_with(Encode&& encode, CUtensorMap* map) const {
    return encode(map, type, rank, address, dims, strides, box, element_strides, interleave,
                  swizzle, l2_promotion, oob_fill);
  }
};

// An attention operand: [B, H, S, D] by shape (D = 64 or 128), element strides of b, h, s
// (non-negative multiples of 8, or anything for an extent of 1), d contiguous, 16-byte aligned.
// `f16` picks the element type (else bf16); `box_rows` the rows of a box (64 for the operands'
// loads, 16 for the forward's output: one warp's rows).
inline TiledTensorMapArgs attention_tensor_map_args(void* data, const int64_t shape[4],
                                                    const int64_t strides[3], bool f16,
                                                    cuuint32_t box_rows = 64) {
  TiledTensorMapArgs a;
  a.type = f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  a.address = data;
  // Innermost first: d, s, h, b. An empty extent (S = 0) never loads: 1 keeps the map valid.
  const int64_t extent[4] = {shape[3], shape[2], shape[1], shape[0]};
  for (int i = 0; i < 4; ++i) a.dims[i] = static_cast<cuuint64_t>(extent[i] > 0 ? extent[i] : 1);
  // Strides of s, h, b in bytes. An extent of 1 is never stepped over, but TMA still wants a
  // multiple of 16: use the packed stride there.
  cuuint64_t packed = a.dims[0] * 2;
  const int64_t by_dim[3] = {strides[2], strides[1], strides[0]};
  for (int i = 0; i < 3; ++i) {
    a.strides[i] = a.dims[i + 1] > 1 ? static_cast<cuuint64_t>(by_dim[i]) * 2 : packed;
    packed = a.strides[i] * a.dims[i + 1];
  }
  a.box[0] = 64;  // 64 elements = 128 bytes, the swizzle span
  a.box[1] = box_rows;  // 64: half a 128-row tile, one block-mask kv tile
  a.box[2] = 1;
  a.box[3] = 1;
  return a;
}

// The backward's fp32 dQ accumulator, packed [B, H, S, D] (D = 64 or 128), into which the Hopper
// kernel adds its dQ blocks with TMA reductions: boxes of 32 floats (128 bytes, the swizzle
// span) by 16 rows (each warp of a consumer sends its own rows), 128-byte swizzle; rows past S are outside the tensor, so nothing is added
// there.
inline TiledTensorMapArgs dq_accum_tensor_map_args(float* data, const int64_t shape[4]) {
  TiledTensorMapArgs a;
  a.type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  a.address = data;
  const int64_t extent[4] = {shape[3], shape[2], shape[1], shape[0]};
  for (int i = 0; i < 4; ++i) a.dims[i] = static_cast<cuuint64_t>(extent[i] > 0 ? extent[i] : 1);
  for (int i = 0; i < 3; ++i)
    a.strides[i] = (i == 0 ? a.dims[0] * 4 : a.strides[i - 1] * a.dims[i]);
  a.box[0] = 32;
  a.box[1] = 16;  // one warp's rows of a dQ block (attention_bwd_sm90.cuh)
  a.box[2] = 1;
  a.box[3] = 1;
  return a;
}

}  // namespace tilejit
