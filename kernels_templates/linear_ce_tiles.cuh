// Fused linear cross-entropy, backward preparation: which (row tile, vocabulary tile) pairs the
// backward visits (linear_ce_bwd.cuh "Tiles"), their per-row-tile and per-vocabulary-tile lists,
// the upstream gradient per kept row, and the column sums of the analytic smoothing term.
// Deterministic; no atomics.
#pragma once

#include "linear_ce_common.cuh"

namespace tilejit_ce {

// Classes of (row tile, vocabulary tile) pairs (bits).
constexpr unsigned char kTileHot = 1;          // visited: recomputed and multiplied
constexpr unsigned char kTileHoldsTarget = 2;  // holds the target of a row of the row tile
// Of a visited pair, which 64-row halves are computed (bit kHalfShift + h: rows [64 h, 64 h + 64)
// of the row tile): those where some row is hot, and those holding a target of one of their rows
// (so a target's entry is in G exactly when its pair is visited, as without halves). A half that
// is not computed is zero in G: the gradient tiles skip its products, dC its K steps and dE (on
// the Hopper loop) its warpgroup's products.
constexpr int kHalfShift = 2;
constexpr int kHalves = kTileRows / 64;  // two
constexpr int kAllHalves = (1 << kHalves) - 1;

// A visited pair as col_list and pair_list hold it: its row tile, and its computed halves in the
// bits from kPairHalvesShift.
constexpr int kPairHalvesShift = 24;
__device__ __forceinline__ int pair_row_tile(int packed) {
  return packed & ((1 << kPairHalvesShift) - 1);
}
__device__ __forceinline__ int pair_halves(int packed) { return packed >> kPairHalvesShift; }

// Grid (n_rows): g_r for kept rows; ignored rows of dE are zeroed (they get no gradient).
__device__ __forceinline__ void linear_ce_row_grad(const int* slot, const float* upstream,
                                                   int reduction, int n_kept, float* row_grad,
                                                   float* d_hidden, long long d_hidden_stride,
                                                   int dim) {
  int i = blockIdx.x, k = slot[i];
  if (k < 0) {
    for (int d = threadIdx.x; d < dim; d += blockDim.x) d_hidden[i * d_hidden_stride + d] = 0.f;
  } else if (threadIdx.x == 0) {
    float u = reduction == kReduceNone ? upstream[i] : upstream[0];
    row_grad[k] = reduction == kReduceMean ? u / (float)n_kept : u;
  }
}

struct CeClassifyParams {
  CeLayout layout;
  const int* kept = nullptr;
  const int* targets = nullptr;
  const float* lse = nullptr;
  const u16* tile_max = nullptr;  // the forward's, bf16; nullptr: every tile hot
  unsigned char* tile_class = nullptr;
  int n_kept = 0;
  int tile_max_parts = kTileMaxParts;  // parts per (tile, row): linear_ce_fwd 2, _fwd_kl 1
  float log_threshold = 0.f;           // log(threshold)
  int ce_probs = 1;                    // p enters the gradient (alpha < 1 or a z-loss)
  // KL term (teacher_tile_max nullptr: none): q from the student's max, pt from the teacher's.
  const u16* teacher_tile_max = nullptr;  // [num_tiles, n_kept]
  const float* tempered_lse = nullptr;
  const float* teacher_lse = nullptr;
  float inv_temperature = 1.f;
};

// Max of `parts` bf16 maxima of vocabulary tile t for kept row k (target excluded).
__device__ __forceinline__ float tile_max_logit(const u16* tile_max, int parts, int n_kept, int t,
                                                int k) {
  float m = neg_inf();
  for (int part = 0; part < parts; ++part)
    m = fmaxf(m, to_float<false>(tile_max[((long long)t * parts + part) * n_kept + k]));
  return m;
}

// Whether some probability of kept row k in tile t that enters the gradient can reach the
// threshold (exp is monotone and T > 0, so the tile's max logits bound them all).
__device__ __forceinline__ bool tile_is_hot(const CeClassifyParams& q, int t, int k, float lse,
                                            float tempered_lse, float teacher_lse) {
  float zmax = tile_max_logit(q.tile_max, q.tile_max_parts, q.n_kept, t, k);
  if (q.ce_probs && zmax - lse >= q.log_threshold) return true;
  if (!q.teacher_tile_max) return false;
  float tmax = tile_max_logit(q.teacher_tile_max, 1, q.n_kept, t, k);
  return zmax * q.inv_temperature - tempered_lse >= q.log_threshold ||
         tmax * q.inv_temperature - teacher_lse >= q.log_threshold;
}

// Grid (row tiles, ceil(num_tiles / 64)), 128 threads: one thread per row of the row tile.
__device__ __forceinline__ void linear_ce_classify(const CeClassifyParams& q) {
  static_assert(kTileRows == 128 && kHalves == 2, "two warps per half");
  __shared__ unsigned warp_flags[4];  // per warp: bit 0 some row hot, bit 1 some row's target
  int rt = blockIdx.x, k = rt * kTileRows + threadIdx.x;
  bool ok = k < q.n_kept;
  float lse = ok ? q.lse[k] : 0.f;
  float tempered = ok && q.teacher_tile_max ? q.tempered_lse[k] : 0.f;
  float teacher = ok && q.teacher_tile_max ? q.teacher_lse[k] : 0.f;
  int ttile = ok ? id_tile(q.layout, q.targets[q.kept[k]]) : -1;
  int t0 = blockIdx.y * 64, t1 = min(q.layout.num_tiles, t0 + 64);
  const int warp = threadIdx.x >> 5;
  for (int t = t0; t < t1; ++t) {
    bool hot = q.tile_max == nullptr || (ok && tile_is_hot(q, t, k, lse, tempered, teacher));
    const unsigned hot_rows = __ballot_sync(0xffffffffu, hot);
    const unsigned tgt_rows = __ballot_sync(0xffffffffu, ttile == t);
    if ((threadIdx.x & 31) == 0) warp_flags[warp] = (hot_rows != 0) | (tgt_rows != 0) << 1;
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned half_hot = 0, half_tgt = 0;
      for (int w = 0; w < 4; ++w) {
        half_hot |= (warp_flags[w] & 1) << (w / 2);
        half_tgt |= (warp_flags[w] >> 1 & 1) << (w / 2);
      }
      const unsigned char c = half_hot ? kTileHot | (half_hot | half_tgt) << kHalfShift : 0;
      q.tile_class[(long long)rt * q.layout.num_tiles + t] = c | (half_tgt ? kTileHoldsTarget : 0);
    }
    __syncthreads();  // warp_flags consumed
  }
}

// Grid (row tiles), 256 threads: the visited vocabulary tiles of each row tile, ascending.
__device__ __forceinline__ void linear_ce_row_lists(const unsigned char* tile_class, int num_tiles,
                                                    int* row_list, int* row_count) {
  __shared__ int scratch[33];
  int rt = blockIdx.x, base = 0;
  for (int c = 0; c < num_tiles; c += blockDim.x) {
    int t = c + threadIdx.x;
    bool v = t < num_tiles && (tile_class[(long long)rt * num_tiles + t] & kTileHot);
    int total, pos = block_exclusive_count(v, scratch, &total);
    if (v) row_list[(long long)rt * num_tiles + base + pos] = t;
    base += total;
  }
  if (threadIdx.x == 0) row_count[rt] = base;
}

// One thread per vocabulary tile: its visited row tiles, ascending (packed with their computed
// halves: pair_row_tile, pair_halves), their number of computed halves, and each one's rank there
// (pair_rank[rt, tile]: the pair's place among the tile's, read only for visited pairs); then the
// row tiles that only hold a target there (its corrections), ascending from the list's last entry
// backwards (the two sets are disjoint: they share the tile's num_row_tiles entries), and their
// number.
__device__ __forceinline__ void linear_ce_col_lists(const unsigned char* tile_class, int num_tiles,
                                                    int num_row_tiles, int* col_list,
                                                    int* col_count, int* col_steps,
                                                    int* col_corrections, int* pair_rank) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tiles) return;
  int* list = col_list + (long long)t * num_row_tiles;
  int n = 0, halves = 0, held = 0;
  for (int rt = 0; rt < num_row_tiles; ++rt) {
    const unsigned char c = tile_class[(long long)rt * num_tiles + t];
    if (c & kTileHot) {
      pair_rank[(long long)rt * num_tiles + t] = n;
      list[n++] = rt | (c >> kHalfShift & kAllHalves) << kPairHalvesShift;
      halves += __popc(c >> kHalfShift & kAllHalves);
    } else if (c == kTileHoldsTarget) {
      list[num_row_tiles - 1 - held++] = rt;
    }
  }
  col_count[t] = n;
  col_steps[t] = halves;
  col_corrections[t] = held;
}

// The visited pairs, numbered tile by tile (linear_ce_bwd.cuh "G"). One block of 1024 threads:
// pair_first[t] = the pairs of the tiles before t (pair_first[num_tiles] = all of them), and
// staged_first[t] = the tiles before t whose weight rows the backward stages (visited, in a
// segment with an order whose weights it does not read in position order, `stage` set;
// linear_ce_stage_weights).
__device__ __forceinline__ void linear_ce_pair_offsets(const CeLayout& L, const int* col_count,
                                                       int stage, int* pair_first,
                                                       int* staged_first) {
  __shared__ int scratch[33];
  int pairs = 0, staged = 0;
  for (int c = 0; c < L.num_tiles; c += blockDim.x) {
    const int t = c + threadIdx.x;
    const int n = t < L.num_tiles ? col_count[t] : 0;
    const bool st = n > 0 && stage && staged_weights(L.seg[tile_segment(L, t)]);
    int pair_total, staged_total;
    const int pair_pos = block_exclusive_sum(n, scratch, &pair_total);
    const int staged_pos = block_exclusive_count(st, scratch, &staged_total);
    if (t < L.num_tiles) {
      pair_first[t] = pairs + pair_pos;
      staged_first[t] = staged + staged_pos;
    }
    pairs += pair_total;
    staged += staged_total;
  }
  if (threadIdx.x == 0) {
    pair_first[L.num_tiles] = pairs;
    staged_first[L.num_tiles] = staged;
  }
}

// One thread per vocabulary tile: pair_list[pair] = (tile, row tile packed with its computed
// halves) for each of its pairs.
__device__ __forceinline__ void linear_ce_pair_list(const int* col_list, const int* col_count,
                                                    const int* pair_first, int num_tiles,
                                                    int num_row_tiles, int2* pair_list) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tiles) return;
  const int n = col_count[t], first = pair_first[t];
  for (int k = 0; k < n; ++k)
    pair_list[first + k] = make_int2(t, col_list[(long long)t * num_row_tiles + k]);
}

// The order the gradient tiles of a chunk (vocabulary tiles [chunk_first, + chunk_tiles)) compute
// its pairs in: visit[k], k from pair_first[chunk_first] on, is the k-th pair to compute. The
// Hopper loop's persistent CTAs take the pairs in turns, so the CTAs running at once take about
// as many consecutive entries of `visit`: in pair_list's order those are one vocabulary tile's
// row tiles, each CTA reading rows of its own (again for every vocabulary tile). Here the chunk's
// tiles go in groups of `group`, and within a group the first `group` visited row tiles of each
// tile, then the next `group` of each, and so on: the CTAs running at once share about `group`
// row tiles and `group` vocabulary tiles, whose reads meet in L2. One thread per pair of the
// chunk (grid: ceil(pairs / blockDim)).
__device__ __forceinline__ void linear_ce_pair_visit(const int* pair_first, const int2* pair_list,
                                                     int chunk_first, int chunk_tiles, int group,
                                                     int* visit) {
  const int i = pair_first[chunk_first] + int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= pair_first[chunk_first + chunk_tiles]) return;
  const int t = pair_list[i].x, r = i - pair_first[t];  // the pair: tile t's r-th row tile
  const int c0 = chunk_first + (t - chunk_first) / group * group;  // t's group of tiles
  const int c1 = min(c0 + group, chunk_first + chunk_tiles);
  const int j0 = r / group * group;  // the first rank of r's block
  int k = pair_first[c0] + (r - j0);
  for (int c = c0; c < c1; ++c) {
    const int n = pair_first[c + 1] - pair_first[c];
    k += min(n, j0);                             // the group's blocks before r's
    if (c < t) k += min(max(n - j0, 0), group);  // r's block, in the tiles before t
  }
  visit[k] = i;
}

// Column sums for the analytic smoothing term. Grid (ceil(dim / 256), parts): part j sums rows
// [j*rows_per_part, ...) of `base` (row index map `rows` when given, weights when given) into
// partial[j, :]. linear_ce_sum_parts then adds the parts in order.
__device__ __forceinline__ void linear_ce_colsum_part(const u16* base, long long stride, int n,
                                                      const int* rows, const float* weights,
                                                      int dim, int rows_per_part, int is_f16,
                                                      float* partial) {
  int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= dim) return;
  int r0 = blockIdx.y * rows_per_part, r1 = min(n, r0 + rows_per_part);
  float acc = 0.f;
  for (int r = r0; r < r1; ++r) {
    long long row = rows ? rows[r] : r;
    u16 bits = base[row * stride + d];
    float v = is_f16 ? to_float<true>(bits) : to_float<false>(bits);
    acc += weights ? weights[r] * v : v;
  }
  partial[(long long)blockIdx.y * dim + d] = acc;
}

__device__ __forceinline__ void linear_ce_sum_parts(const float* partial, int parts, int dim,
                                                    float* out) {
  int d = blockIdx.x * blockDim.x + threadIdx.x;
  if (d >= dim) return;
  float acc = 0.f;
  for (int j = 0; j < parts; ++j) acc += partial[(long long)j * dim + d];
  out[d] = acc;
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
__global__ void linear_ce_row_grad_kernel(const int* slot, const float* upstream, int reduction,
                                          int n_kept, float* row_grad, float* d_hidden,
                                          long long d_hidden_stride, int dim) {
  linear_ce_row_grad(slot, upstream, reduction, n_kept, row_grad, d_hidden, d_hidden_stride, dim);
}
__global__ void __launch_bounds__(128)
    linear_ce_classify_kernel(const __grid_constant__ CeClassifyParams q) {
  linear_ce_classify(q);
}
__global__ void __launch_bounds__(256)
    linear_ce_row_lists_kernel(const unsigned char* tile_class, int num_tiles, int* row_list,
                               int* row_count) {
  linear_ce_row_lists(tile_class, num_tiles, row_list, row_count);
}
__global__ void linear_ce_col_lists_kernel(const unsigned char* tile_class, int num_tiles,
                                           int num_row_tiles, int* col_list, int* col_count,
                                           int* col_steps, int* col_corrections, int* pair_rank) {
  linear_ce_col_lists(tile_class, num_tiles, num_row_tiles, col_list, col_count, col_steps,
                      col_corrections, pair_rank);
}
__global__ void __launch_bounds__(1024)
    linear_ce_pair_offsets_kernel(const __grid_constant__ CeLayout L, const int* col_count,
                                  int stage, int* pair_first, int* staged_first) {
  linear_ce_pair_offsets(L, col_count, stage, pair_first, staged_first);
}
__global__ void linear_ce_pair_list_kernel(const int* col_list, const int* col_count,
                                           const int* pair_first, int num_tiles, int num_row_tiles,
                                           int2* pair_list) {
  linear_ce_pair_list(col_list, col_count, pair_first, num_tiles, num_row_tiles, pair_list);
}
__global__ void linear_ce_pair_visit_kernel(const int* pair_first, const int2* pair_list,
                                            int chunk_first, int chunk_tiles, int group,
                                            int* visit) {
  linear_ce_pair_visit(pair_first, pair_list, chunk_first, chunk_tiles, group, visit);
}
__global__ void linear_ce_colsum_part_kernel(const u16* base, long long stride, int n,
                                             const int* rows, const float* weights, int dim,
                                             int rows_per_part, int is_f16, float* partial) {
  linear_ce_colsum_part(base, stride, n, rows, weights, dim, rows_per_part, is_f16, partial);
}
__global__ void linear_ce_sum_parts_kernel(const float* partial, int parts, int dim, float* out) {
  linear_ce_sum_parts(partial, parts, dim, out);
}
#endif

}  // namespace tilejit_ce
