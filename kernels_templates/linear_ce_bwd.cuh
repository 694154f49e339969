// Fused linear cross-entropy, backward: G (the logits' gradient) from the forward's lse, which
// the products (linear_ce_products.cuh) turn into dE and dC_s (and dbias).
//
// Gradient of the row loss with respect to a live logit z_v = logit_mod(x_v) (compiler/IR.h):
//   dL/dz_v = p_v (1 - alpha + 2 lambda lse) - (1 - alpha)(1 - eps) [v = target]
//             - (1 - alpha) eps / L + alpha T (q_v - pt_v),
//   p_v = exp(z_v - lse), q_v = exp(z_v / T - tempered_lse), pt_v = exp(t_v / T - teacher_lse)
// (alpha = 0 without a KL term; t the teacher's logits, recomputed like the student's), and
// G[r, v] = g_r * dL/dz_v * logit_grad(x_v), g_r the upstream gradient of row r (1, 1/n_kept
// or the per-row upstream value). dE = G . C, dC = G^T . E, dbias = column sums of G. The teacher
// gets no gradient.
//
// Tiles. The (row tile, vocabulary tile) grid is classified once, at the forward's end, from its
// tile maxima (linear_ce_classify, linear_ce_tiles.cuh), into two bits: kTileHot, some row has
// exp(max logit - lse) >= threshold (with a KL term: or q or pt, from the student's and the
// teacher's max logits; target excluded; threshold 0: every tile), and kTileHoldsTarget, the
// tile holds the target of some row of the row tile. Only hot tiles are visited (recomputed,
// multiplied); the others are skipped entirely.
// Target entries: in a hot tile a target's entry is part of G like any other. A target whose
// tile is not hot for its row tile is a sparse correction instead (linear_ce_target_grad computes
// its fp32 entry t_k): dE_k += t_k C[target], dC[target] += t_k E_k, dbias[target] += t_k. So a
// target alone never makes a tile survive: a tile survives only if its probabilities do.
// Halves: within a visited pair, a 64-row half with no hot row and no target of its rows is not
// computed (linear_ce_tiles.cuh kHalfShift): its rows of G are zero, the gradient tiles skip its
// products (and, but for a KL program's, its operand rows), dC its K steps, and on the Hopper
// loop dE's warpgroup of that half its products (the portable loops multiply the zeros). On zipf
// data with a vocabulary order about three quarters of a visited pair's halves are computed (H200
// harness: Gemma-2 13.4% of all halves against 18.3% of pairs, Llama-3 26.1% against 35.1%).
// The uniform smoothing term -eps/L is handled analytically when logit_mod is the identity
// (dE_r -= g_r eps/L sum_v C_v, dC_v -= eps/L sum_r g_r E_r), so it never keeps a tile alive;
// with another logit_mod it is part of every visited tile, and filtering should be off.
// Tiles are tiles of positions of a segment's vocabulary order (linear_ce_common.cuh): weight
// rows are gathered through it, and dC / dbias rows are written to the weights' own rows.
//
// G. Only visited (row tile, vocabulary tile) pairs are recomputed and stored. They are numbered
// tile by tile, each tile's in ascending row tile order (linear_ce_col_lists / _pair_offsets /
// _pair_list): the k-th visited row tile of `tile` is pair pair_first[tile] + k, and G stores
// each pair as one 128 x 128 block (rows = the row tile's kept rows, columns = the tile's ids;
// row stride 128 elements). Work is done per vocabulary chunk (a run of at most 1024 tiles whose
// blocks, with their staged weight rows, fit the bf16/fp16 buffer's budget the host plans from
// the pairs' counts, runtime/LinearCeWorkspace.h; a tile that alone needs more gets a chunk of
// its own and the buffer grows to it): for each chunk linear_ce_grad writes the
// chunk's blocks (the chunk's first pair is block 0), then the products (linear_ce_products.cuh)
// read them: dE, dC, dbias. A sparse backward then needs as few chunks as its visited pairs fill,
// and launches no CTA for a pair it skips. Launch shape of the grad kernel (CeGradLaunch,
// CeGradKlLaunch): the portable loop's CeGradCta over a grid of the chunk's pairs, or on the
// Hopper loop a persistent CTA (CeGradPingpongCta, or CeGradKlWsCta with a KL term) over
// min(pairs, SMs) CTAs.
#pragma once

#include "ce_wgmma_pingpong.cuh"
#include "linear_ce_common.cuh"
#include "linear_ce_kl_operands.cuh"
#include "linear_ce_tiles.cuh"

namespace tilejit_ce {

struct CeBwdParams {
  CeLayout layout;
  CeRows rows;
  const float* lse = nullptr;           // [n_kept]
  const float* target_logit = nullptr;  // [n_kept]
  const float* target_raw = nullptr;    // [n_kept]
  const float* row_grad = nullptr;      // [n_kept] g_r
  float* target_grad = nullptr;         // [n_kept] G's entry at the row's target, or nullptr (no
                                        // sparse target correction: every tile is visited)
  int* target_slot = nullptr;           // [n_kept] the target's slot (id_slot)
  const unsigned char* tile_class = nullptr;  // [row tiles, num_tiles]
  const int* row_list = nullptr;         // [row tiles, num_tiles]: visited vocab tiles, ascending
  const int* row_count = nullptr;        // [row tiles]
  const int* col_list = nullptr;         // [num_tiles, row tiles]: visited row tiles, ascending,
                                         // packed with their computed halves (pair_row_tile ...)
  const int* col_count = nullptr;        // [num_tiles]
  const int* col_steps = nullptr;        // [num_tiles]: their computed halves (dC's K steps)
  const int* col_corrections = nullptr;  // [num_tiles]: the row tiles holding a target correction
                                         // there (kTileHoldsTarget alone), listed ascending from
                                         // the end of the tile's col_list backwards
  const int* pair_rank = nullptr;     // [row tiles, num_tiles]: a visited pair's place in its tile
  const int* pair_first = nullptr;    // [num_tiles + 1]: the first pair of each tile
  const int* staged_first = nullptr;  // [num_tiles + 1]: the staged tiles before each tile
  const int2* pair_list = nullptr;    // [pairs]: (tile, row tile and halves: pair_row_tile ...)
  const int* pair_visit = nullptr;    // [pairs]: the order a chunk's pairs are computed in
                                      // (linear_ce_pair_visit), or nullptr: pair_list's
  int* item_counter = nullptr;  // a persistent product launch's items handed out in order (zero
                                // at its start), or nullptr: CTA c takes c, c + CTAs, ...
  u16* grad = nullptr;          // G: the chunk's pairs' 128 x 128 blocks
  float* d_hidden = nullptr;          // [n_rows, dim] fp32 (original rows)
  long long d_hidden_stride = 0;
  const float* weight_colsum = nullptr;  // [dim] sum_v C_v (analytic smoothing) or nullptr
  const float* hidden_wsum = nullptr;    // [dim] sum_r g_r E_r (analytic smoothing)
  const float* grad_sum = nullptr;       // [1] sum_r g_r (analytic smoothing)
  int num_row_tiles = 0;
  int chunk_first = 0;  // first global tile of this chunk
  int chunk_tiles = 0;  // tiles in this chunk
  int first_chunk = 1;  // dE is written (not accumulated) by the first chunk
  // dL/dz's coefficients: p_v's (1 - alpha; z-loss added per row), the target's
  // ((1 - alpha)(1 - eps)) and the uniform smoothing term's ((1 - alpha) eps / L).
  float prob_weight = 1.f, target_weight = 1.f, uniform = 0.f, z_loss = 0.f;
  CeKlBackward kl;  // kl.weight 0: no KL term
};

// ---- G ---------------------------------------------------------------------------------

constexpr int kStageStride = kTileIds + 8;  // padded staging rows: conflict-free fragment stores

// What G's entries of kept row k share: the kernel's coefficients (read once: a store could
// alias them otherwise and they would be re-read per entry) and the row's lse, weights and (KL)
// tempered lses.
struct GradRowTerms {
  float lse, prob_weight, target_weight, uniform, row_grad;
  float kl_weight, inv_t, tempered_lse, teacher_lse;  // KL only
};

// kTempered false (a KL term at T = 1): z / T is z and the tempered lse is lse, so q_v is p_v.
template <bool kKl, bool kTempered = true>
__device__ __forceinline__ GradRowTerms grad_row_terms(const CeBwdParams& p, int k) {
  GradRowTerms t;
  t.lse = p.lse[k];
  t.prob_weight = p.prob_weight + 2.f * p.z_loss * t.lse;
  t.target_weight = p.target_weight;
  t.uniform = p.uniform;
  t.row_grad = p.row_grad[k];
  if (kKl) {
    t.kl_weight = p.kl.weight;
    t.inv_t = kTempered ? p.kl.teacher.inv_temperature : 1.f;
    t.tempered_lse = kTempered ? p.kl.tempered_lse[k] : t.lse;
    t.teacher_lse = p.kl.teacher_lse[k];
  }
  return t;
}

// G's entry at (kept row k, id) from its row's terms, z = logit_mod(x), (KL) the teacher's
// modded logit tz and lg = d logit_mod / d logit at the raw logit x. `subtract_uniform`: the
// smoothing term is not applied analytically (weight_colsum) for this program.
template <bool kKl, bool kTempered = true>
__device__ __forceinline__ float grad_entry(const GradRowTerms& t, bool subtract_uniform, float z,
                                            float tz, float lg, bool is_target) {
  float pr = fast_exp2((z - t.lse) * kLog2e);
  float gd = pr * t.prob_weight - (is_target ? t.target_weight : 0.f);
  if (subtract_uniform) gd -= t.uniform;
  if (kKl) {
    const float q = kTempered ? fast_exp2((z * t.inv_t - t.tempered_lse) * kLog2e) : pr;
    float pt = fast_exp2((tz * t.inv_t - t.teacher_lse) * kLog2e);
    gd += t.kl_weight * (q - pt);
  }
  return t.row_grad * gd * lg;
}

// G's block of the k-th visited row tile of `tile` within this chunk ("G" above), and the
// chunk's staged weight tile of `tile` (linear_ce_stage_weights).
__device__ __forceinline__ int chunk_block(const CeBwdParams& p, int tile, int k) {
  return p.pair_first[tile] - p.pair_first[p.chunk_first] + k;
}
__device__ __forceinline__ int chunk_staged_tile(const CeBwdParams& p, int tile) {
  return p.staged_first[tile] - p.staged_first[p.chunk_first];
}
// G's row `r` of `block`: 128 contiguous entries.
__device__ __forceinline__ long long grad_block_row(int block, int r) {
  return ((long long)block * kTileRows + r) * kTileIds;
}

// Copies the staged 128 x 128 G tile to its block of G (16-byte stores).
__device__ __forceinline__ void store_grad_tile(const CeBwdParams& p, const u16* stage, int block) {
  for (int c = threadIdx.x; c < kTileRows * 16; c += blockDim.x) {
    int r = c >> 4, ch = c & 15;
    uint4 v = *reinterpret_cast<const uint4*>(stage + r * kStageStride + ch * 8);
    *reinterpret_cast<uint4*>(p.grad + grad_block_row(block, r) + ch * 8) = v;
  }
}

// The backward's tensor maps on the Hopper loop (runtime/LinearCeTma.h), 2-D, 64 x 64 boxes with
// 128-byte swizzle: one box is a 64-row block of a K-major tile or one 64-column panel of an
// MN-major one, as load_kmajor / load_mnmajor lay them out. `grad`: G's blocks [blocks * 128,
// 128] (the gradient tiles store through it, the products load); `hidden`: the kept rows of E
// [n_kept, dim]; `staged`: the chunk's weight rows of segments with an order, in visiting order
// (linear_ce_stage_weights); `weight`: each segment's rows [size, dim] (CeSegment::
// weights_by_position: in position order, the forward's copy in the gradient buffer).
struct CeBwdMaps {
  tjk::TmaDescriptor grad, hidden, staged;
  tjk::TmaDescriptor weight[kMaxSegments];
};

// G's entries of one gradient tile from its logits: for each of this thread's accumulator entries
// (rows Cta::row(mi, h) of the tile, row tile row0; columns Cta::col(ni) + e of vocabulary tile
// positions lbase.. of segment S), store(r, ni, two entries packed) with 0 outside the rows, the
// computed halves (bit h: rows [64 h, 64 h + 64); linear_ce_tiles.cuh) and the segment.
template <class Prog, class Args, class Cta, bool kF16, bool kKl, class Acc, class Store>
__device__ __forceinline__ void grad_tile_entries(const Args& args, const CeBwdParams& p,
                                                  const CeSegment& S, int s, int lbase, int row0,
                                                  int halves, const Acc& acc, const Acc& teacher,
                                                  Store store) {
  const CeRows& R = p.rows;
  // The hooks' constant parts once, after the products (no registers held across their loop);
  // their row parts and the row's terms once per row; the segment's fields in registers (read
  // through S per entry they would be re-read after every store).
  const LogitHooks<Prog, Args, true> hooks(args);
  const bool subtract_uniform = !(Prog::kLogitIsIdentity && p.weight_colsum);
  const u16* const bias = S.bias;
  const u16* const teacher_bias = kKl ? p.kl.teacher.layout.seg[s].bias : nullptr;
  const int seg_begin = S.begin;
  const int* const order = S.order;
  const int col0 = lbase + Cta::col(0), cols_in = S.size - col0;
#pragma unroll
  for (int mi = 0; mi < Cta::kMI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = Cta::row(mi, h), k = row0 + r;
      const bool row_ok = k < R.n_kept && (halves >> (r / 64) & 1);
      const int orig = row_ok ? R.kept[k] : 0, tgt = row_ok ? R.targets[orig] : -1;
      const auto at = hooks.at_row(orig);
      const GradRowTerms terms = grad_row_terms<kKl, Prog::kKlTempered>(p, row_ok ? k : 0);
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni) {
        float g2[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          g2[e] = 0.f;
          const int c = ni * 8 + e;
          if (row_ok && c < cols_in) {
            const int wrow = order ? order[col0 + c] : col0 + c, id = seg_begin + wrow;
            float x = acc[mi][ni][h * 2 + e];
            if (bias) x += to_float<kF16>(bias[wrow]);
            const float z = at.mod(x, id);
            float tz = 0.f;
            if (kKl) {
              float xt = teacher[mi][ni][h * 2 + e];
              if (teacher_bias) xt += to_float<kF16>(teacher_bias[wrow]);
              tz = at.mod(xt, id);
            }
            g2[e] = grad_entry<kKl, Prog::kKlTempered>(terms, subtract_uniform, z, tz,
                                                       at.grad(x, id), id == tgt);
          }
        }
        store(r, ni, pack2<kF16>(g2[0], g2[1]));
      }
    }
}

// Grid (the chunk's pairs); CeGradCta::kThreads threads (launch bounds: two CTAs per SM;
// one with kKl, whose second GEMM recomputes the teacher's tile: ks = max(ceil(D / 64),
// ceil(D_t / 64)) K steps each, as in linear_ce_fwd_kl). The portable tile loop, whose operands
// come by cp.async (an ordered segment's weight rows gathered through its order).
template <class Prog, class Args, bool kF16, bool kKl = false>
__device__ __forceinline__ void linear_ce_grad(const Args& args, const CeBwdParams& p) {
  typedef CeGradCta Cta;
  extern __shared__ __align__(1024) u16 grad_smem[];
  u16* smem = grad_smem;
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const CeTeacher& T = p.kl.teacher;
  const int block = blockIdx.x;
  const int2 pair = p.pair_list[p.pair_first[p.chunk_first] + block];
  const int tile = pair.x, rt = pair_row_tile(pair.y);
  const int row0 = rt * kTileRows;
  const int s = tile_segment(L, tile);
  const CeSegment& S = L.seg[s];
  const int lbase = (tile - S.first_tile) * kTileIds;
  u16* stage = smem;

  const int ksteps =
      kKl ? (max(R.dim, T.dim) + Cta::kK - 1) / Cta::kK : (R.dim + Cta::kK - 1) / Cta::kK;
  // With an order (and no teacher, whose segment has its own), this thread's weight rows of the
  // tile are read once rather than before every step's copies.
  GatheredRows<kTileIds, Cta::kThreads> wrows;
  const bool rows_read = !kKl && S.order;
  if (rows_read) wrows.read(S.order + lbase, S.size - lbase, threadIdx.x);
  auto load = [&](u16* a_tile, u16* b_tile, int step) {
    const bool of_teacher = kKl && step >= ksteps;
    const int k0 = (step - (of_teacher ? ksteps : 0)) * Cta::kK;
    const u16* hidden = of_teacher ? T.hidden : R.hidden;
    const long long stride = of_teacher ? T.hidden_stride : R.hidden_stride;
    const int dim = of_teacher ? T.dim : R.dim;
    load_kmajor<kTileRows, Cta::kThreads>(
        a_tile, CeOperand{hidden + row0 * stride + k0, stride, R.n_kept - row0, dim - k0});
    const CeOperand w = weight_rows(of_teacher ? T.layout.seg[s] : S, lbase, k0, dim - k0);
    if (rows_read)
      load_kmajor<kTileIds, Cta::kThreads>(b_tile, w, wrows, threadIdx.x);
    else
      load_kmajor<kTileIds, Cta::kThreads>(b_tile, w);
  };
  typename Cta::Acc acc, teacher;  // the student's logits; with kKl, the teacher's
  if (kKl) {
    typename Cta::Acc student;
    auto keep = [&](int half, typename Cta::Acc& a) {  // two copies: no dynamically indexed array
      if (half)
        copy_acc(a, teacher);
      else
        copy_acc(a, student);
    };
    gemm_loop<Cta, kF16, true, true>(smem, 2 * ksteps, ksteps, load, keep, acc);
    copy_acc(student, acc);
  } else {  // one tile: the accumulators stay as they are at the end
    gemm_loop<Cta, kF16, true, true>(smem, ksteps, 1 << 30, load, KeepAccumulators(), acc);
  }
  grad_tile_entries<Prog, Args, Cta, kF16, kKl>(
      args, p, S, s, lbase, row0, pair_halves(pair.y), acc, teacher, [&](int r, int ni, u32 v) {
        *reinterpret_cast<u32*>(stage + r * kStageStride + Cta::col(ni)) = v;
      });
  __syncthreads();
  store_grad_tile(p, stage, block);
}

// A computing warpgroup's output tile of G on the Hopper loop: kRows rows of a 128 x 128 block by
// kTileIds columns, in shared memory at `tile` with the layout a TMA load of the same boxes would
// write (two 64-column panels of kRows rows of 128 bytes, 16-byte chunk c of row r at c ^ (r % 8)),
// so the fragments' stores are conflict-free and 64 x 64 boxes carry it out. Its warpgroup's
// threads meet on named barrier `barrier`; its thread 0 (`storer`) issues the stores.
template <int kRows>
struct GradOutTile {
  unsigned char* tile;
  int barrier;
  bool storer;

  // Before the entries: the stores of this warpgroup's previous tile have read it.
  __device__ __forceinline__ void acquire() const {
    if (storer) tjk::bulk_wait_group_read<0>();
    tjk::named_barrier_sync(barrier, 128);
  }
  // Entries (r, 8 ni + 2 (lane % 4) + {0, 1}) of the block, r within this tile's rows (mod kRows).
  __device__ __forceinline__ void put(int r, int ni, u32 v) const {
    const int rr = r % kRows;
    const u32 chunk = (ni & 7) ^ (rr & 7);
    *reinterpret_cast<u32*>(tile + (ni >> 3) * (kRows * kRowBytes) + rr * kRowBytes + chunk * 16 +
                            (threadIdx.x & 3) * 4) = v;
  }
  // After the entries: the tile to G's rows from `row` (through the map of G's blocks).
  __device__ __forceinline__ void store(const tjk::TmaDescriptor* grad, int row) const {
    tjk::fence_proxy_async_shared();  // the stores read it through the async proxy
    tjk::named_barrier_sync(barrier, 128);
    if (!storer) return;
    const u32 base = smem_addr(tile);
#pragma unroll
    for (int j = 0; j < kTileIds / 64; ++j)
#pragma unroll
      for (int i = 0; i < kRows / 64; ++i)
        tjk::tma_store_2d(grad, base + j * (kRows * kRowBytes) + i * 64 * kRowBytes, 64 * j,
                          row + 64 * i);
    tjk::bulk_commit_group();
  }
};

// The index in pair_list of the t-th pair that persistent gradient CTA b (of `grid`) computes:
// the chunk's pairs (from `first`) in turns, in p.pair_visit's order where given.
__device__ __forceinline__ int chunk_pair(const CeBwdParams& p, int first, int b, int grid, int t) {
  const int k = first + b + t * grid;
  return p.pair_visit ? p.pair_visit[k] : k;
}

// The gradient tiles' Hopper CTA (ce_wgmma.cuh): persistent, 128 x 128 tiles taken in turns by
// two computing warpgroups, a four-stage ring filled by TMA (the kept rows, and each segment's
// weights or, with an order, the chunk's staged copy of them), G stored by TMA from each
// warpgroup's output tile. One CTA per SM; 384 threads, 192 KiB.
typedef CePingpongCta<kTileRows, kTileIds, 4> CeGradPingpongCta;

// The gradient tiles on the Hopper loop: grid min(the chunk's pairs, SMs), CTA b taking pairs b,
// b + grid, ... (chunk_pair); CeGradPingpongCta's threads and shared memory. What each tile
// computes and stores is linear_ce_grad's; the operands come by TMA (`maps`: hidden, weight[s],
// staged; G stored through grad from each warpgroup's GradOutTile, four 64 x 64 boxes per tile).
template <class Prog, class Args, bool kF16>
__device__ __forceinline__ void linear_ce_grad_pingpong(const Args& args, const CeBwdParams& p,
                                                        const CeBwdMaps& maps) {
  typedef CeGradPingpongCta Cta;
  extern __shared__ __align__(1024) u16 grad_smem[];
  const CeLayout& L = p.layout;
  const int first = p.pair_first[p.chunk_first];
  const int pairs = p.pair_first[p.chunk_first + p.chunk_tiles] - first;
  const int b = blockIdx.x, grid = gridDim.x;
  const int tiles = b < pairs ? (pairs - b + grid - 1) / grid : 0;
  const int ksteps = (p.rows.dim + Cta::kK - 1) / Cta::kK;
  // The loader's view of its current tile: the rows of its operands' boxes.
  int loaded = -1, hidden_row = 0, weight_row = 0, halves = 0;
  const tjk::TmaDescriptor* weight_map = nullptr;
  auto load_tma = [&](u32 stage, u32 full, int t, int k) {
    if (t != loaded) {
      const int2 pair = p.pair_list[chunk_pair(p, first, b, grid, t)];
      const int s = tile_segment(L, pair.x);
      const CeSegment& S = L.seg[s];
      hidden_row = pair_row_tile(pair.y) * kTileRows;
      halves = pair_halves(pair.y);
      const bool staged = staged_weights(S);
      weight_map = staged ? &maps.staged : &maps.weight[s];
      weight_row =
          staged ? chunk_staged_tile(p, pair.x) * kTileIds : (pair.x - S.first_tile) * kTileIds;
      loaded = t;
    }
    const int k0 = k * Cta::kK;  // A: the computed halves' rows only
    tjk::mbar_arrive_expect_tx(full, (__popc(halves) * 64 + kTileIds) * kRowBytes);
#pragma unroll
    for (int j = 0; j < kHalves; ++j)
      if (halves >> j & 1)
        tjk::tma_load_2d(stage + j * 64 * kRowBytes, &maps.hidden, k0, hidden_row + 64 * j, full);
    const u32 b_tile = stage + Cta::kAElems * 2;
#pragma unroll
    for (int j = 0; j < kTileIds / 64; ++j)
      tjk::tma_load_2d(b_tile + j * 64 * kRowBytes, weight_map, k0, weight_row + 64 * j, full);
  };
  const int wg = Cta::group();
  const GradOutTile<kTileRows> out{
      reinterpret_cast<unsigned char*>(grad_smem) + Cta::kRingBytes + wg * Cta::kOutBytes, 2 + wg,
      (threadIdx.x & 127) == 0};
  auto tile_done = [&](int t, typename Cta::Acc& acc) {
    const int index = chunk_pair(p, first, b, grid, t);
    const int block = index - first;  // the pair's block of G in this chunk
    const int2 pair = p.pair_list[index];
    const int s = tile_segment(L, pair.x);
    const CeSegment& S = L.seg[s];
    out.acquire();
    grad_tile_entries<Prog, Args, Cta, kF16, false>(
        args, p, S, s, (pair.x - S.first_tile) * kTileIds, pair_row_tile(pair.y) * kTileRows,
        pair_halves(pair.y), acc, acc, [&](int r, int ni, u32 v) { out.put(r, ni, v); });
    out.store(&maps.grad, block * kTileRows);
  };
  static_assert(Cta::kMI == kHalves, "one m64 fragment per half of the row tile");
  auto fragments = [&](int t) {
    return unsigned(pair_halves(p.pair_list[chunk_pair(p, first, b, grid, t)].y));
  };
  if (!gemm_loop_sm90_pingpong<Cta, kF16>(grad_smem, tiles, ksteps, load_tma, tile_done, fragments))
    return;
  if (out.storer) tjk::bulk_wait_group<0>();  // G is written before the CTA's shared memory goes
}

// A KL program's gradient tiles on the Hopper loop: grid min(the chunk's pairs, SMs), CTA b taking
// pairs b, b + grid, ... (chunk_pair; CeGradKlWsCta's threads and shared memory). What each tile
// computes and stores is linear_ce_grad<kKl>'s: the student's and the teacher's logits of the
// pair, both products in registers (gemm_loop_sm90_ws_joint; their operands as
// linear_ce_fwd_kl's, by TMA through `kl_maps`, but an ordered segment's student weight rows by
// TMA from the chunk's staged copy, maps.staged, and its teacher's gathered unless they are the
// student's), then G's entries; G is stored by TMA through maps.grad. Computing warpgroup w holds
// rows [64 w, 64 w + 64) of the tile, the tile's half w, and stages them in a GradOutTile<64> of
// its own; a warpgroup whose half is not computed skips its products and stores zeros.
struct CeGradKlWsCta : CeKlWsCta {
  static constexpr int kRingBytes = CeKlWsCta::kSmemBytes;
  static constexpr int kOutBytes = 64 * kTileIds * 2;  // a computing warpgroup's output tile
  static constexpr int kSmemBytes = kRingBytes + 2 * kOutBytes;
};
template <class Prog, class Args, bool kF16>
__device__ __forceinline__ void linear_ce_grad_kl_ws(const Args& args, const CeBwdParams& p,
                                                     const CeBwdMaps& maps,
                                                     const CeKlMaps& kl_maps) {
  typedef CeGradKlWsCta Cta;
  static_assert(Cta::kM == kTileRows && Cta::kMI == 1, "a warpgroup per half of the row tile");
  extern __shared__ __align__(1024) u16 grad_smem[];
  const CeLayout& L = p.layout;
  const CeTeacher& T = p.kl.teacher;
  const CeRows& R = p.rows;
  const int first = p.pair_first[p.chunk_first];
  const int pairs = p.pair_first[p.chunk_first + p.chunk_tiles] - first;
  const int b = blockIdx.x, grid = gridDim.x;
  const int tiles = b < pairs ? (pairs - b + grid - 1) / grid : 0;
  const int ks = kl_ksteps(R.dim, T.dim);
  auto pair_index = [&](int t) { return chunk_pair(p, first, b, grid, t); };
  // The loaders' view of step `step`: both products of this CTA's pair step / ks.
  int located = -1, row0 = 0;
  KlPair q{};
  auto locate = [&](int step) {
    const int t = step / ks;
    if (t != located) {
      const int2 pair = p.pair_list[pair_index(t)];
      q = kl_pair(L, T, R, pair.x, 0);
      if (q.student.seg->order) {  // by TMA: the forward's copy in position order (kl_maps'
        q.student.boxed = true;    // map over it), or the chunk's staged copy
        if (!q.student.seg->weights_by_position)
          q.staged_row = chunk_staged_tile(p, pair.x) * kTileIds;
      }
      row0 = pair_row_tile(pair.y) * kTileRows;
      located = t;
    }
    return t;
  };
  KlPairCopies copies;
  auto load = [&](u16*, u16* b_tiles, int step) {
    const int t = locate(step);
    copies(b_tiles, q, t, (step % ks) * Cta::kK);
  };
  auto load_boxes = [&](u32 stage, u32 full, int step) {
    locate(step);
    kl_load_step(kl_maps, q, row0, (step % ks) * Cta::kK, stage, full, true, 1, 0, &maps.staged);
  };

  const int wg = threadIdx.x >> 7;  // computing warpgroup: the tile's half wg
  const GradOutTile<64> out{
      reinterpret_cast<unsigned char*>(grad_smem) + Cta::kRingBytes + wg * Cta::kOutBytes, 2 + wg,
      (threadIdx.x & 127) == 0};
  auto pair_done = [&](int t, typename Cta::Acc& student, typename Cta::Acc& teacher) {
    const int index = pair_index(t);
    const int block = index - first;  // the pair's block of G in this chunk
    const int2 pair = p.pair_list[index];
    const int s = tile_segment(L, pair.x);
    const CeSegment& S = L.seg[s];
    out.acquire();
    grad_tile_entries<Prog, Args, Cta, kF16, true>(
        args, p, S, s, (pair.x - S.first_tile) * kTileIds, pair_row_tile(pair.y) * kTileRows,
        pair_halves(pair.y), student, teacher, [&](int r, int ni, u32 v) { out.put(r, ni, v); });
    out.store(&maps.grad, block * kTileRows + 64 * wg);
  };
  // A warpgroup skips both products of a pair whose half it holds is not computed.
  auto skip =
      skip_when([&](int t) { return !(pair_halves(p.pair_list[pair_index(t)].y) >> wg & 1); });
  typename Cta::Acc student, teacher;
  auto shares_b = [&](int t) {
    return T.shares_weights(tile_segment(L, p.pair_list[pair_index(t)].x));
  };
  if (!gemm_loop_sm90_ws_joint<Cta, kF16>(grad_smem, tiles, ks, load, pair_done, student, teacher,
                                          shares_b, kl_ring(L, T), load_boxes,
                                          kl_all_boxes(L, T, 0, true), skip))
    return;  // a loading warpgroup: done
  // G is written before the CTA's shared memory goes.
  if (out.storer) tjk::bulk_wait_group<0>();
}

// The gradient tiles of a program without a KL term: on the Hopper loop where the module asks
// for it (kSm90Loop) and is compiled for sm_90a, else the portable one (which ignores `maps`).
template <class Prog, class Args, bool kF16, bool kSm90Loop>
__device__ __forceinline__ void linear_ce_grad(const Args& args, const CeBwdParams& p,
                                               const CeBwdMaps& maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kSm90Loop) {
    linear_ce_grad_pingpong<Prog, Args, kF16>(args, p, maps);
    return;
  }
#endif
  linear_ce_grad<Prog, Args, kF16, false>(args, p);
}

// The gradient tiles of a KL program: on the Hopper loop where the module asks for it (kSm90Loop)
// and is compiled for sm_90a, else the portable one (which ignores the maps).
template <class Prog, class Args, bool kF16, bool kSm90Loop>
__device__ __forceinline__ void linear_ce_grad_kl(const Args& args, const CeBwdParams& p,
                                                  const CeBwdMaps& maps, const CeKlMaps& kl_maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kSm90Loop) {
    linear_ce_grad_kl_ws<Prog, Args, kF16>(args, p, maps, kl_maps);
    return;
  }
#endif
  linear_ce_grad<Prog, Args, kF16, true>(args, p);
}

// The gradient kernel's launch shape: CeGradCta (two per SM), or CeGradPingpongCta (one) where
// linear_ce_grad runs the Hopper loop.
template <bool kSm90Loop>
struct CeGradLaunch {
  static constexpr int kThreads = CeGradCta::kThreads, kMinBlocks = 2;
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <>
struct CeGradLaunch<true> {
  static constexpr int kThreads = CeGradPingpongCta::kThreads, kMinBlocks = 1;
};
#endif
// A KL program's: CeGradCta (one per SM: both products' accumulators), or CeGradKlWsCta.
template <bool kSm90Loop>
struct CeGradKlLaunch {
  static constexpr int kThreads = CeGradCta::kThreads;
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <>
struct CeGradKlLaunch<true> {
  static constexpr int kThreads = CeGradKlWsCta::kThreads;
};
#endif

// Grid (ceil(n_kept / 256)), 256 threads: per kept row, its target's slot and the fp32 entry of
// G there, for the sparse target correction (used where the target's tile is not hot).
template <class Prog, class Args, bool kKl = false>
__device__ __forceinline__ void linear_ce_target_grad(const Args& args, const CeBwdParams& p) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= p.rows.n_kept) return;
  const int orig = p.rows.kept[k], id = p.rows.targets[orig];
  p.target_slot[k] = id_slot(p.layout, id);
  const float tz = kKl ? p.kl.teacher_target_logit[k] : 0.f;
  const float lg = LogitHooks<Prog, Args, true>(args).at_row(orig).grad(p.target_raw[k], id);
  p.target_grad[k] =
      grad_entry<kKl>(grad_row_terms<kKl>(p, k), !(Prog::kLogitIsIdentity && p.weight_colsum),
                      p.target_logit[k], tz, lg, true);
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
template <class Prog, class Args, bool kF16, bool kSm90Loop = false>
__global__ void __launch_bounds__(CeGradLaunch<kSm90Loop>::kThreads,
                                  CeGradLaunch<kSm90Loop>::kMinBlocks)
    linear_ce_grad_kernel(const __grid_constant__ Args args, const __grid_constant__ CeBwdParams p,
                          const __grid_constant__ CeBwdMaps maps) {
  linear_ce_grad<Prog, Args, kF16, kSm90Loop>(args, p, maps);
}
template <class Prog, class Args>
__global__ void linear_ce_target_grad_kernel(const __grid_constant__ Args args,
                                             const __grid_constant__ CeBwdParams p) {
  linear_ce_target_grad<Prog, Args>(args, p);
}
#endif

}  // namespace tilejit_ce
