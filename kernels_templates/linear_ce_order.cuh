// The pre-pass of the vocabulary order (runtime/LinearCe.h "Vocabulary order"): each live id's
// average raw logit over the kept rows, mean_k(E_k) . C_v + b_v, which is one GEMV against the
// column sums of E (linear_ce_colsum_part / linear_ce_sum_parts). The host sorts the ids of each
// segment by it (runtime/VocabOrderPlan.h). Deterministic: fixed summation orders.
#pragma once

#include "linear_ce_common.cuh"

namespace tilejit_ce {

// Grid (ceil(size / 8)), 256 threads: one warp per weight row of a segment,
//   score[row] = scale * <weight[row], hidden_sum> + bias[row]   (bias may be nullptr)
// where hidden_sum is fp32 [dim] (dim a multiple of 8: each lane reads 16-byte chunks).
__device__ __forceinline__ void linear_ce_average_logit(const u16* weight, long long stride,
                                                        const u16* bias, int size,
                                                        const float* hidden_sum, float scale,
                                                        int dim, int is_f16, float* score) {
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= size) return;
  const u16* w = weight + row * stride;
  float acc = 0.f;
  for (int c = lane * 8; c < dim; c += 32 * 8) {
    const uint4 chunk = *reinterpret_cast<const uint4*>(w + c);
    const u32 words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const u16 lo = u16(words[j] & 0xffffu), hi = u16(words[j] >> 16);
      const float a = is_f16 ? to_float<true>(lo) : to_float<false>(lo);
      const float b = is_f16 ? to_float<true>(hi) : to_float<false>(hi);
      acc = fmaf(a, hidden_sum[c + 2 * j], acc);
      acc = fmaf(b, hidden_sum[c + 2 * j + 1], acc);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) {
    float b = 0.f;
    if (bias) b = is_f16 ? to_float<true>(bias[row]) : to_float<false>(bias[row]);
    score[row] = scale * acc + b;
  }
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
__global__ void linear_ce_average_logit_kernel(const u16* weight, long long stride, const u16* bias,
                                               int size, const float* hidden_sum, float scale,
                                               int dim, int is_f16, float* score) {
  linear_ce_average_logit(weight, stride, bias, size, hidden_sum, scale, dim, is_f16, score);
}
#endif

}  // namespace tilejit_ce
