// dense_mask: evaluates an attention program's mask_mod at every (b, h, q, kv) into a
// [B, H, Sq, Skv] uint8 tensor (1 = attend). The reference form of a mask, for interop with
// frameworks that take dense masks and for testing the block-sparse paths against.
//
// Grid: x over kv (blockDim.x positions per block), y over q, z over b * H. y and z are capped
// by the host (CUDA limits them to 65535) and loop in strides of the grid size.
#pragma once

#include "common.cuh"

// The fixed launch parameters (mirrored on the host by runtime/DenseMask.cpp).
struct DenseMaskParams {
  unsigned char* out;       // [B, H, Sq, Skv]
  long long out_stride[4];  // in elements (bytes)
  int batch;
  int heads;
  int seq_q;
  int seq_kv;
};

template <class P>
__device__ __forceinline__ void dense_mask_kernel(const DenseMaskParams& p, const TjArgs& a) {
  const long long kv = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kv >= p.seq_kv) return;
  const int bh_count = p.batch * p.heads;
  for (int bh = blockIdx.z; bh < bh_count; bh += gridDim.z) {
    const int b = bh / p.heads;
    const int h = bh - b * p.heads;
    unsigned char* row = p.out + b * p.out_stride[0] + h * p.out_stride[1] + kv * p.out_stride[3];
    for (int q = blockIdx.y; q < p.seq_q; q += gridDim.y) {
      bool attend = true;
      if constexpr (!P::kMaskIsTrue) attend = P::mask_mod(a, b, h, q, static_cast<int>(kv));
      row[q * p.out_stride[2]] = attend ? 1 : 0;
    }
  }
}
