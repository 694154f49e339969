// The pre-pass of the vocabulary order (runtime/LinearCe.h "Vocabulary order"): each live id's
// average raw logit over the kept rows, mean_k(E_k) . C_v + b_v, which is one GEMV against the
// column sums of E (linear_ce_colsum_part / linear_ce_sum_parts); then each segment's ids sorted
// by it on the device (the radix sort below: the order of runtime/VocabOrderPlan.h's
// order_by_score, bit for bit) and the order's inverse. Deterministic: fixed summation orders,
// stable passes.
#pragma once

#include "linear_ce_common.cuh"

namespace tilejit_ce {

// Grid (ceil(size / kAverageLogitRows)), 256 threads: four consecutive weight rows of a segment
// per warp,
//   score[row] = scale * <weight[row], hidden_sum> + bias[row]   (bias may be nullptr)
// where hidden_sum is fp32 [dim] (dim a multiple of 8: each lane reads 16-byte chunks). The four
// rows' chunks are in flight together and share one read of their eight hidden sums: a read of
// the whole weight matrix at the memory's pace rather than at one load's latency per warp.
constexpr int kAverageLogitRowsPerWarp = 4, kAverageLogitRows = 8 * kAverageLogitRowsPerWarp;
__device__ __forceinline__ void linear_ce_average_logit(const u16* weight, long long stride,
                                                        const u16* bias, int size,
                                                        const float* hidden_sum, float scale,
                                                        int dim, int is_f16, float* score) {
  constexpr int R = kAverageLogitRowsPerWarp;
  const int lane = threadIdx.x & 31;
  const int first = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
  if (first >= size) return;
  const u16* w[R];
#pragma unroll
  for (int r = 0; r < R; ++r) w[r] = weight + (long long)min(first + r, size - 1) * stride;
  float acc[R] = {};
  for (int c = lane * 8; c < dim; c += 32 * 8) {
    uint4 chunk[R];
#pragma unroll
    for (int r = 0; r < R; ++r) chunk[r] = __ldg(reinterpret_cast<const uint4*>(w[r] + c));
    const float4 h0 = __ldg(reinterpret_cast<const float4*>(hidden_sum + c));
    const float4 h1 = __ldg(reinterpret_cast<const float4*>(hidden_sum + c + 4));
    const float h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const u32 words[4] = {chunk[r].x, chunk[r].y, chunk[r].z, chunk[r].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const u16 lo = u16(words[j] & 0xffffu), hi = u16(words[j] >> 16);
        const float a = is_f16 ? to_float<true>(lo) : to_float<false>(lo);
        const float b = is_f16 ? to_float<true>(hi) : to_float<false>(hi);
        acc[r] = fmaf(a, h[2 * j], acc[r]);
        acc[r] = fmaf(b, h[2 * j + 1], acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
  if (lane < R && first + lane < size) {
    float a = acc[0];
#pragma unroll
    for (int r = 1; r < R; ++r)
      if (lane == r) a = acc[r];
    const int row = first + lane;
    float b = 0.f;
    if (bias) b = is_f16 ? to_float<true>(bias[row]) : to_float<false>(bias[row]);
    score[row] = scale * a + b;
  }
}

// ---- the order: a stable radix sort of the scores ------------------------------------------
// Least significant byte first, four passes over 32-bit keys (descending_key), ids riding along:
// each pass is stable and the ids start ascending, so equal scores keep ascending ids, exactly
// as order_by_score on the host. A pass is three launches: linear_ce_radix_counts (each block's
// digit histogram over its kRadixItems items), linear_ce_radix_offsets (one exclusive prefix sum
// over the histograms, digit after digit, block after block within a digit) and
// linear_ce_radix_scatter (each block writes its items to their digit's next places, in item
// order). Every count and place is exact integer arithmetic: the same output on every run.
constexpr int kRadixThreads = 256, kRadixItems = 2048, kRadixDigits = 256;
static_assert(kRadixThreads == kRadixDigits, "a thread per digit: the histograms and places");
static_assert(kRadixItems % kRadixThreads == 0, "whole rounds of kRadixThreads items");

// The key of order_by_score (runtime/VocabOrderPlan.cpp): ascending keys are descending scores,
// -0 ties with +0, NaN after everything.
__device__ __forceinline__ u32 descending_key(float score) {
  if (score != score) return 0xffffffffu;
  if (score == 0.f) score = 0.f;
  const u32 u = __float_as_uint(score);
  const u32 ascending = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~ascending;
}

// keys[i] = descending_key(score[i]), ids[i] = i. Grid (ceil(n / 256)), 256 threads.
__device__ __forceinline__ void linear_ce_order_keys(const float* score, int n, u32* keys,
                                                     int* ids) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  keys[i] = descending_key(score[i]);
  ids[i] = i;
}

// counts[d * gridDim.x + b] = the items of block b (items b * kRadixItems ..) whose byte at
// `shift` is d. Grid (ceil(n / kRadixItems)), kRadixThreads threads.
__device__ __forceinline__ void linear_ce_radix_counts(const u32* keys, int n, int shift,
                                                       int* counts) {
  __shared__ int hist[kRadixDigits];
  hist[threadIdx.x] = 0;
  __syncthreads();
  const int first = blockIdx.x * kRadixItems, last = min(n, first + kRadixItems);
  for (int i = first + threadIdx.x; i < last; i += kRadixThreads)
    atomicAdd(&hist[(keys[i] >> shift) & 0xff], 1);
  __syncthreads();
  counts[threadIdx.x * gridDim.x + blockIdx.x] = hist[threadIdx.x];
}

// counts[0 .. total) replaced by their exclusive prefix sums. One block (any multiple of 32
// threads up to 1024; launched with 1024) over runs of blockDim.x consecutive entries, one per
// thread (coalesced), each run's sums carried into the next.
__device__ __forceinline__ void linear_ce_radix_offsets(int* counts, int total) {
  __shared__ int scratch[33];
  int carried = 0;
  for (int base = 0; base < total; base += blockDim.x) {
    const int i = base + threadIdx.x;
    const int c = i < total ? counts[i] : 0;
    int run_total;
    const int at = block_exclusive_sum(c, scratch, &run_total);
    if (i < total) counts[i] = carried + at;
    carried += run_total;
  }
}

// One stable pass: item i of block b goes to offsets[d * gridDim.x + b] plus the number of the
// block's items before it with the same digit d. The block takes its items kRadixThreads at a
// time; within a round, a thread's place among its digit's items comes from the lanes before it
// with that digit (__match_any_sync) and the warps before it (their digit counts in shared
// memory). Grid (ceil(n / kRadixItems)), kRadixThreads threads.
__device__ __forceinline__ void linear_ce_radix_scatter(const u32* keys, const int* ids, int n,
                                                        int shift, const int* offsets,
                                                        u32* keys_out, int* ids_out) {
  constexpr int kWarps = kRadixThreads / 32;
  __shared__ int next[kRadixDigits];                // the digit's next place
  __shared__ int warp_count[kWarps][kRadixDigits];  // this round's items per warp and digit
  const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
  next[t] = offsets[t * gridDim.x + blockIdx.x];
  const int first = blockIdx.x * kRadixItems;
  for (int round = 0; round < kRadixItems / kRadixThreads; ++round) {
    const int i = first + round * kRadixThreads + t;
    const bool valid = i < n;
    const u32 key = valid ? keys[i] : 0u;
    const int digit = valid ? int((key >> shift) & 0xff) : kRadixDigits;  // past n: no digit
#pragma unroll
    for (int w = 0; w < kWarps; ++w) warp_count[w][t] = 0;
    __syncthreads();  // zeroed, and the last round's counts consumed
    const unsigned peers = __match_any_sync(0xffffffffu, digit);
    const int before_in_warp = __popc(peers & ((1u << lane) - 1u));
    if (valid && before_in_warp == 0) warp_count[warp][digit] = __popc(peers);
    __syncthreads();
    if (valid) {
      int at = next[digit] + before_in_warp;
      for (int w = 0; w < warp; ++w) at += warp_count[w][digit];
      keys_out[at] = key;
      ids_out[at] = ids[i];
    }
    __syncthreads();  // every thread has read next[]
    int round_total = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) round_total += warp_count[w][t];
    next[t] += round_total;
  }
}

// rank[order[p]] = p. Grid (ceil(n / 256)), 256 threads.
__device__ __forceinline__ void linear_ce_rank_of(const int* order, int n, int* rank) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p < n) rank[order[p]] = p;
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
  if (!staged_weights(S)) return;
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

// A segment's weight gradient written by position (CeSegment::d_weight_by_position) put into
// weight-row order in place, along the cycles of position -> order[position]
// (runtime/VocabOrderPlan.h position_cycles: `rows`, runs `first`, `next`). `base`: the rows, each
// `units` 16-byte units, `stride` units apart. Grid (runs), any block size: a block per run, each
// thread a fixed set of a row's units through the whole run, so that a unit is read and then
// written by the same thread, in that order.
// linear_ce_save_cycle_heads: saves each run's first row to `heads` (units apart), before
// linear_ce_move_cycles, which moves run r's rows one step along the cycle, from its last element
// back to its first (that one's content from heads), kCycleBatch rows read before they are
// written (the rows a batch writes are its own sources or rows read before, never a later one's).
constexpr int kCycleBatch = 4;
__device__ __forceinline__ void linear_ce_save_cycle_heads(const int* rows, const int* first,
                                                           const uint4* base, long long stride,
                                                           int units, uint4* heads) {
  const long long src = (long long)rows[first[blockIdx.x]] * stride;
  for (int u = threadIdx.x; u < units; u += blockDim.x)
    heads[(long long)blockIdx.x * units + u] = base[src + u];
}
__device__ __forceinline__ void linear_ce_move_cycles(const int* rows, const int* first,
                                                      const int* next, uint4* base,
                                                      long long stride, int units,
                                                      const uint4* heads) {
  const int r = blockIdx.x, a = first[r], b = first[r + 1];
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    int dst = next[r];
    for (int j = b - 1; j >= a; j -= kCycleBatch) {  // elements j, j - 1, ... (down to a)
      uint4 v[kCycleBatch];
      int src[kCycleBatch];
#pragma unroll
      for (int i = 0; i < kCycleBatch; ++i) {
        src[i] = j - i >= a ? rows[j - i] : -1;
        if (j - i > a)
          v[i] = base[(long long)src[i] * stride + u];
        else if (j - i == a)
          v[i] = heads[(long long)r * units + u];
      }
#pragma unroll
      for (int i = 0; i < kCycleBatch; ++i) {
        if (src[i] < 0) break;
        base[(long long)dst * stride + u] = v[i];
        dst = src[i];
      }
    }
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
