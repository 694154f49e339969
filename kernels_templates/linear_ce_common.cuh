// Shared pieces of the fused linear cross-entropy kernels: the vocabulary layout as the kernels
// see it, the kept-row view of the hidden states, row compaction, and block-level helpers.
//
// Tiling of the vocabulary: every segment is cut into tiles of kTileIds ids starting at its own
// first id, so a tile never straddles two segments and dead ids are never visited. Tiles are
// numbered globally, segment after segment; CeSegment::first_tile is the number of a segment's
// first tile. Rows: ignore_index rows are compacted away first (linear_ce_compact_rows);
// every other kernel walks "kept" rows k = 0..n_kept-1, original row kept[k].
//
// Vocabulary order: the kernels tile *positions* 0..V_s-1 of a segment. Position p holds weight
// row order[p] (global id begin + order[p]); rank[] is the inverse. Without an order (nullptr)
// position p is row p. An order only changes which ids share a tile: weight rows are gathered
// through it, gradients are written back to their own rows, and ids, targets and per-row results
// are the caller's (runtime/LinearCe.h "Vocabulary order").
//
// Hook interface filled by generated code (compiler/codegen/LossKernels.h; stand-ins in
// tests/gpu/linear_ce_harness.cu):
//   struct Prog {
//     static constexpr bool kLogitIsIdentity;
//     __device__ static float logit_mod(const Args&, float logit, int row, int id);
//     __device__ static float logit_grad(const Args&, float logit, int row, int id);
//   };
// `row` is the original row index, `id` the global vocabulary id. Generated hooks also come
// split into a constant part, a row part and the per-logit rest; the kernels call them through
// LogitHooks (linear_ce_hook_parts.cuh), which takes hand-written ones as they are.
#pragma once

#include "ce_mma.cuh"
#include "linear_ce_hook_parts.cuh"

namespace tilejit_ce {

constexpr int kMaxSegments = 4;
constexpr int kTileRows = 128;  // rows of E per (row tile, vocabulary tile) gradient tile
constexpr int kTileIds = 128;   // vocabulary ids per tile

// CTA shapes: forward (kept rows x vocabulary ids), gradient tiles (kTileRows x kTileIds), and
// the two backward products (rows x dims for dE, ids x dims for dC).
// Shared memory: 144 KiB (+12 KiB static) for the wide CTAs, which fits sm_80's 163 KiB;
// 4 stages measured no faster on H200.
typedef CeCta<256, 128, 3, 64> CeFwdCta;          // 8 warps of 64 x 64: one CTA per SM
typedef CeCta<kTileRows, kTileIds, 3> CeGradCta;  // 8 warps of 64 x 32, 96 KiB: two per SM
typedef CeCta<128, 256, 3, 64> CeProductCta;      // 8 warps of 64 x 64: one CTA per SM
constexpr int kFwdRows = CeFwdCta::kM;
// The forward records a vocabulary tile's max logit per row and 64-column part, as bf16 rounded
// up (the backward's classification takes the max of the parts): tile_max[tile, part, kept row].
constexpr int kTileMaxParts = kTileIds / 64;
static_assert(kTileMaxParts == CeFwdCta::kWarpsN, "a portable forward column warp: one part");

enum CeReduction : int { kReduceNone = 0, kReduceSum = 1, kReduceMean = 2 };

struct CeSegment {
  const u16* weight = nullptr;  // [size, dim], row stride weight_stride (elements)
  const u16* bias = nullptr;    // [size] or nullptr
  void* d_weight = nullptr;     // [size, dim] fp32 (or E's dtype: d_weight_16), row stride
                                // d_weight_stride
  float* d_bias = nullptr;      // [size] fp32 or nullptr
  const int* order = nullptr;   // [size] position -> weight row, or nullptr (natural order)
  const int* rank = nullptr;    // [size] weight row -> position (order's inverse), or nullptr
  long long weight_stride = 0;
  long long d_weight_stride = 0;
  int begin = 0;        // global id of row 0
  int size = 0;         // V_s
  int first_tile = 0;   // global tile number of position 0
  int d_weight_16 = 0;  // 1: d_weight holds E's 16-bit type (rounded once per entry), else fp32
  // The backward of an ordered segment on the Hopper loop (runtime/LinearCeBackward.cpp, "The
  // weights in position order"): 1 where its weight tiles come by TMA from the forward's copy of
  // the weights in position order (CeBwdMaps::weight), not from a per-chunk staged copy;
  int weights_by_position = 0;
  // 1 where dC rows go to d_weight by position, over that copy (each chunk's after its last
  // reader), and linear_ce_move_cycles puts them in weight-row order at the end.
  int d_weight_by_position = 0;
};

struct CeLayout {
  CeSegment seg[kMaxSegments];
  int num_segments = 0;
  int num_tiles = 0;  // sum over segments of ceil(size / kTileIds)
  int live_ids = 0;   // sum of sizes
};

// The kept rows of E and their targets. `hidden` is E compacted to the kept rows (row k is
// original row kept[k]; linear_ce_gather_rows): every operand load is then a plain strided
// copy, with no index lookup between a barrier and the tensor cores.
struct CeRows {
  const u16* hidden = nullptr;  // [n_kept, dim], row stride hidden_stride
  long long hidden_stride = 0;
  const int* kept = nullptr;     // [n_kept] original row indices, ascending
  const int* targets = nullptr;  // [n_rows] global ids (ignore_index rows are not kept)
  int n_kept = 0;
  int dim = 0;  // multiple of 8 (16-byte copies)
};

// The teacher of a KL term, as the kernels see it: the student's tiling (same segments, same
// vocabulary order, same tiles) with the teacher's weights and biases, and the teacher's hidden
// states compacted to the kept rows like CeRows::hidden. Its dim may differ from the student's.
struct CeTeacher {
  CeLayout layout;
  const u16* hidden = nullptr;  // [n_kept, dim], row stride hidden_stride
  long long hidden_stride = 0;
  int dim = 0;
  float inv_temperature = 1.f;  // 1 / T
  // Bit s: segment s's teacher weight rows are the student's (the same rows in the same order,
  // dim equal): the Hopper loop then brings one weight tile for both products (linear_ce_kl.cuh).
  int shared_weights = 0;
  __device__ __forceinline__ bool shares_weights(int s) const { return (shared_weights >> s) & 1; }
};

// The forward's KL outputs (linear_ce_kl.cuh). Partials per (split, kept row) like CeFwdParams':
// the tempered student softmax(z / T), the teacher's softmax(t / T), and
// cross = sum_v exp(t_v / T - teacher_max) (t_v / T - z_v / T), rescaled with teacher_max.
struct CeKlForward {
  CeTeacher teacher;
  float* tempered_max = nullptr;          // [splits, n_kept]
  float* tempered_sum = nullptr;          // [splits, n_kept]
  float* teacher_max = nullptr;           // [splits, n_kept]
  float* teacher_sum = nullptr;           // [splits, n_kept]
  float* cross = nullptr;                 // [splits, n_kept]
  float* teacher_target_logit = nullptr;  // [n_kept] t at the target
  u16* teacher_tile_max = nullptr;        // [num_tiles, n_kept] bf16 rounded up, or nullptr
};

// The merge's KL inputs and outputs (cross nullptr: no KL term).
struct CeKlMerge {
  const float* tempered_max = nullptr;
  const float* tempered_sum = nullptr;
  const float* teacher_max = nullptr;
  const float* teacher_sum = nullptr;
  const float* cross = nullptr;
  float* tempered_lse = nullptr;  // [n_kept] log sum exp(z / T)
  float* teacher_lse = nullptr;   // [n_kept] log sum exp(t / T)
  float alpha = 0.f, temperature = 1.f;
};

// What the backward needs of a KL term: G gains alpha T (q_v - pt_v), q = softmax(z / T),
// pt = softmax(t / T).
struct CeKlBackward {
  CeTeacher teacher;
  const float* tempered_lse = nullptr;
  const float* teacher_lse = nullptr;
  const float* teacher_target_logit = nullptr;
  float weight = 0.f;  // alpha * T; 0: no KL term
};

__device__ __forceinline__ int tile_segment(const CeLayout& L, int tile) {
  int s = 0;
#pragma unroll
  for (int i = 1; i < kMaxSegments; ++i)
    if (i < L.num_segments && tile >= L.seg[i].first_tile) s = i;
  return s;
}

// Weight row at position `pos` of S, and the position of weight row `row`.
__device__ __forceinline__ int seg_row(const CeSegment& S, int pos) {
  return S.order ? S.order[pos] : pos;
}
// The row of d_weight that gets the gradient of position `pos` (d_weight_by_position: `pos`).
__device__ __forceinline__ int d_weight_row(const CeSegment& S, int pos) {
  return S.d_weight_by_position ? pos : seg_row(S, pos);
}
// Whether the backward reads S's weight tiles from the chunk's staged copy (an order on the
// Hopper loop, unless they are read in position order where the forward left them).
__device__ __forceinline__ bool staged_weights(const CeSegment& S) {
  return S.order && !S.weights_by_position;
}
__device__ __forceinline__ int seg_position(const CeSegment& S, int row) {
  return S.rank ? S.rank[row] : row;
}

// Weight rows at positions [pos0, size) of S, columns [k0, k0 + cols), as an operand: a
// strided block, or rows gathered through S's order.
__device__ __forceinline__ CeOperand weight_rows(const CeSegment& S, int pos0, int k0, int cols) {
  if (S.order)
    return CeOperand{S.weight + k0, S.weight_stride, S.size - pos0, cols, S.order + pos0};
  return CeOperand{S.weight + pos0 * S.weight_stride + k0, S.weight_stride, S.size - pos0, cols};
}

// Global slot of live id `id` in the tiled vocabulary (tile = slot / kTileIds), or -1 when the id
// is in no segment.
__device__ __forceinline__ int id_slot(const CeLayout& L, int id) {
  for (int s = 0; s < L.num_segments; ++s) {
    int row = id - L.seg[s].begin;
    if (row >= 0 && row < L.seg[s].size)
      return L.seg[s].first_tile * kTileIds + seg_position(L.seg[s], row);
  }
  return -1;
}

// Global tile holding global id `id` (a live id), or -1.
__device__ __forceinline__ int id_tile(const CeLayout& L, int id) {
  int slot = id_slot(L, id);
  return slot < 0 ? -1 : slot / kTileIds;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Inclusive prefix sum of `v` over the warp's lanes.
__device__ __forceinline__ int warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// The block-wide part of the prefix sums below: scratch[w] holds warp w's total on entry
// (written before the call); on return (every thread) scratch[w] holds the totals of the warps
// before w and scratch[32] the block's.
__device__ __forceinline__ void scan_warp_totals(int* scratch, int lane, int warp, int nwarps) {
  __syncthreads();
  if (warp == 0) {
    const int v = lane < nwarps ? scratch[lane] : 0, incl = warp_inclusive_sum(v, lane);
    if (lane < nwarps) scratch[lane] = incl - v;
    if (lane == 31) scratch[32] = incl;
  }
  __syncthreads();
}

// Exclusive prefix sum of `v` over the block (blockDim.x a multiple of 32, at most 1024), in
// thread order; *total receives the block's sum. Uses `scratch` (33 ints).
__device__ __forceinline__ int block_exclusive_sum(int v, int* scratch, int* total) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const int incl = warp_inclusive_sum(v, lane);
  if (lane == 31) scratch[warp] = incl;
  scan_warp_totals(scratch, lane, warp, nwarps);
  int pos = scratch[warp] + incl - v;
  *total = scratch[32];
  __syncthreads();
  return pos;
}

// Exclusive prefix count of `flag` over the block (blockDim.x a multiple of 32, at most 1024),
// in thread order; *total receives the block's count. Uses `scratch` (33 ints).
__device__ __forceinline__ int block_exclusive_count(bool flag, int* scratch, int* total) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  unsigned ballot = __ballot_sync(0xffffffffu, flag);
  int before = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0) scratch[warp] = __popc(ballot);
  scan_warp_totals(scratch, lane, warp, nwarps);
  int pos = scratch[warp] + before;
  *total = scratch[32];
  __syncthreads();
  return pos;
}

// One block (1024 threads): kept[] = rows whose target is not ignore_index, in order;
// slot[i] = position of row i in kept[] or -1; *count = number kept. Deterministic.
__device__ __forceinline__ void linear_ce_compact_rows(const int* targets, int n_rows,
                                                       int ignore_index, int* kept, int* slot,
                                                       int* count) {
  __shared__ int scratch[33];
  int base = 0;
  for (int c = 0; c < n_rows; c += blockDim.x) {
    int i = c + threadIdx.x;
    bool keep = i < n_rows && targets[i] != ignore_index;
    int total;
    int pos = block_exclusive_count(keep, scratch, &total);
    if (i < n_rows) {
      slot[i] = keep ? base + pos : -1;
      if (keep) kept[base + pos] = i;
    }
    base += total;
  }
  if (threadIdx.x == 0) *count = base;
}

// Grid (n_kept), 128 threads: out[k, :] = hidden[kept[k], :] (dim a multiple of 8).
__device__ __forceinline__ void linear_ce_gather_rows(const u16* hidden, long long stride,
                                                      const int* kept, int dim, u16* out) {
  const uint4* src = reinterpret_cast<const uint4*>(hidden + kept[blockIdx.x] * stride);
  uint4* dst = reinterpret_cast<uint4*>(out + (long long)blockIdx.x * dim);
  for (int c = threadIdx.x; c < dim / 8; c += blockDim.x) dst[c] = src[c];
}

#ifndef __CUDACC_RTC__
// nvcc builds (tests/gpu/linear_ce_harness.cu) launch the kernels directly; under NVRTC the
// generated translation units define extern "C" entry points instead
// (compiler/codegen/LossKernels.h), so no mangled kernel is compiled there.
__global__ void __launch_bounds__(1024)
    linear_ce_compact_rows_kernel(const int* targets, int n_rows, int ignore_index, int* kept,
                                  int* slot, int* count) {
  linear_ce_compact_rows(targets, n_rows, ignore_index, kept, slot, count);
}
__global__ void linear_ce_gather_rows_kernel(const u16* hidden, long long stride, const int* kept,
                                             int dim, u16* out) {
  linear_ce_gather_rows(hidden, stride, kept, dim, out);
}
#endif

}  // namespace tilejit_ce
