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

// The weight rows that the backward's dE product of one vocabulary chunk reads from segments
// with an order, staged in visiting order so that the Hopper products bring them by TMA as they
// do an unordered segment's (a gathered tile by cp.async ran the product at a third of the speed:
// dE = G . C reads 64 scattered rows per step): only the tiles some row tile visits
// (col_count > 0) in a segment with an order are staged, in tile order; `staged` row
// j * kTileIds + i holds the weight row at position i of the chunk's j-th such tile
// (staged_first, linear_ce_pair_offsets); its rows past the segment are zero. Grid (chunk tiles,
// kTileIds / 8), 256 threads: 8 rows per block.
__device__ __forceinline__ void linear_ce_stage_weights(const CeLayout& L, const int* col_count,
                                                        const int* staged_first, int chunk_first,
                                                        int dim, u16* staged) {
  const int tile = chunk_first + blockIdx.x;
  if (col_count[tile] == 0) return;
  const CeSegment& S = L.seg[tile_segment(L, tile)];
  if (!S.order) return;
  const long long slot = staged_first[tile] - staged_first[chunk_first];
  const int chunks = dim / 8;  // 16-byte chunks per row
  for (int e = threadIdx.x; e < 8 * chunks; e += blockDim.x) {
    const int i = blockIdx.y * 8 + e / chunks, c = e % chunks;
    const int pos = (tile - S.first_tile) * kTileIds + i;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (pos < S.size)
      v = reinterpret_cast<const uint4*>(S.weight + (long long)S.order[pos] * S.weight_stride)[c];
    reinterpret_cast<uint4*>(staged + (slot * kTileIds + i) * dim)[c] = v;
  }
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
__global__ void linear_ce_stage_weights_kernel(const __grid_constant__ CeLayout L,
                                               const int* col_count, const int* staged_first,
                                               int chunk_first, int dim, u16* staged) {
  linear_ce_stage_weights(L, col_count, staged_first, chunk_first, dim, staged);
}
__global__ void linear_ce_average_logit_kernel(const u16* weight, long long stride, const u16* bias,
                                               int size, const float* hidden_sum, float scale,
                                               int dim, int is_f16, float* score) {
  linear_ce_average_logit(weight, stride, bias, size, hidden_sum, scale, dim, is_f16, score);
}
#endif

}  // namespace tilejit_ce
