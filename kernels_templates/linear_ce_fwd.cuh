// Fused linear cross-entropy, forward: loss and lse without materializing the [N, V] logits.
//
// linear_ce_fwd: grid (ceil(n_kept / 256), vocabulary splits). A CTA computes logit tiles
// E[256 kept rows] . C_s[128 ids]^T on tensor cores, one vocabulary tile after the other over
// its split (tiles of positions: weight rows gathered through the segment's order when it has
// one), with the pipeline running across tile boundaries. Two tile loops, one body: the portable
// CeFwdCta (ce_mma.cuh: 8 warps of 64 x 64, mma.sync, 256 threads) and, when the module asks for
// it (kSm90Loop) and is compiled for sm_90a, CeFwdWsCta (ce_wgmma.cuh: two warpgroups of
// 128 x 128 on wgmma and one that loads, 384 threads, four stages; a step's hidden tile and,
// without an order, its weight tile are TMA boxes, CeFwdMaps; weight rows gathered through an
// order are cp.async copies). The epilogue
// applies bias and logit_mod (its constant part computed once per thread, its row part once per
// row and tile: linear_ce_hook_parts.cuh) and keeps, per thread and row, an online (max, sum of
// exp) and the sum of logits (label smoothing) in registers; the target logit is stored by the
// one thread whose column holds the target. Optionally it records the max logit per (vocabulary
// tile, row), target excluded, which lets the backward pass skip tiles whose gradient is
// negligible: one part per 64 columns, stored by the quad holding it straight from registers
// (bf16, rounded up; no barrier in the tile loop).
// linear_ce_merge: per row, combines the split partials in a fixed order into lse and the
// row loss. linear_ce_reduce: one block sums row losses in a fixed order. Both are
// deterministic; nothing here uses atomics.
#pragma once

#include "ce_wgmma.cuh"
#include "linear_ce_common.cuh"

namespace tilejit_ce {

struct CeFwdParams {
  CeLayout layout;
  CeRows rows;
  float* part_max = nullptr;      // [splits, n_kept]
  float* part_sum = nullptr;      // [splits, n_kept] sum of exp(logit - part_max)
  float* part_zsum = nullptr;     // [splits, n_kept] sum of logits (smoothing) or nullptr
  float* target_logit = nullptr;  // [n_kept] logit_mod(x) at the target
  float* target_raw = nullptr;    // [n_kept] x (before logit_mod) at the target
  u16* tile_max = nullptr;        // [num_tiles, kTileMaxParts, n_kept] bf16 (rounded up) or nullptr
  int tiles_per_split = 1;
  // Bit s: the Hopper loop's weight map of segment s (CeFwdMaps; with a KL term both of CeKlMaps')
  // is over a copy of its rows in position order, so its tiles come by TMA although the segment
  // has an order.
  int weights_in_position_order = 0;
  // CTAs per thread block cluster along the splits (the launch's cluster dimension y; 1: none):
  // the KL forward on the Hopper loop, where a cluster's CTAs share their row tile and read each
  // step's A tile once for all (linear_ce_kl.cuh).
  int split_cluster = 1;
  // > 0: the order the grid's CTAs (or clusters) take their (row tile, split) in: groups of
  // row_group row tiles, every split of a group before the next (fwd_grid_tile), so the CTAs
  // running together share rows and weights in L2; 0: row tile blockIdx.x, split blockIdx.y.
  int row_group = 0;
  CeKlForward kl;  // the KL term's part (linear_ce_kl.cuh); unused without one
};

// The row tile and split of this CTA of a forward grid (row tiles x splits, in clusters of
// `cluster` CTAs along the splits) taken in groups of `group` row tiles (CeFwdParams::row_group;
// 0: none): the clusters in launch order (blockIdx.x fastest) go through a group's row tiles for
// each split (cluster) in turn, so the CTAs running at once share about sqrt(SMs) row tiles and as
// many vocabulary tiles rather than one vocabulary tile and a row tile each, and their operands'
// reads meet in L2. A cluster's CTAs stay together: the same row tile, consecutive splits.
struct FwdGridTile {
  int row_tile, split;
};
__device__ __forceinline__ FwdGridTile fwd_grid_tile(int group, int cluster) {
  if (group <= 0) return {int(blockIdx.x), int(blockIdx.y)};
  const int nx = gridDim.x, ny = gridDim.y / cluster;
  const int id = blockIdx.x + nx * (blockIdx.y / cluster);  // the cluster's launch order
  const int g = id / (group * ny), i = id - g * group * ny;
  const int rows = min(group, nx - g * group);  // the last group's may be fewer
  return {g * group + i % rows, i / rows * cluster + int(blockIdx.y) % cluster};
}

// The forward's tensor maps: the kept rows of E, packed [n_kept, dim] (the runtime compacts them),
// 2-D over (dim, n_kept), 64 x kFwdRows boxes, and each segment's weight rows, 2-D over
// (dim, size), 64 x kTileIds boxes; 128-byte swizzle: one box is a stage's A (or B) tile as
// load_kmajor lays it out (rows and columns past the extent read as zero). Encoded on the host
// (runtime/LinearCeTma.h); read only by the Hopper loop. A segment with an order has its rows
// gathered through cp.async instead, unless the runtime copied them into position order (bit s of
// CeFwdParams::weights_in_position_order: the map is over that copy).
struct CeFwdMaps {
  tjk::TmaDescriptor hidden;
  tjk::TmaDescriptor weight[kMaxSegments];
};

// The Hopper forward CTA: the portable one's tile and shared memory, as two warpgroups of
// 128 x 128 rather than 64 x 256: the same 128 accumulators per thread either way, but 256 x 128
// keeps the vocabulary tile (kTileIds, the backward's tiles and tile_max parts) and the forward's
// row tiles, and its 4 rows per thread carry less online state than 8 m16 rows would. It runs
// warp-specialised (CeWsCta): a third warpgroup issues the copies, the two computing ones only
// wait for stages and issue products. ptxas (CUDA 13.0, sm_90a, NVRTC module of
// examples/programs/gemma2_softcap.tj): 168 registers at launch (setmaxnreg: 56 loading, 224
// computing), no spills, 192 KiB dynamic + 1 KiB static shared memory (the ring's mbarriers),
// 8 HGMMA 64x128x16 per K step, no serialisation warning (the portable loop: 255 registers).
typedef CeWsCta<kFwdRows, kTileIds, 4> CeFwdWsCta;
// Its ring has four stages (192 KiB, past sm_80's 163 KiB): the loaders keep every stage in
// flight. A launch takes the CTA type's threads and shared memory (CeFwdWsCta where the module asks
// for the Hopper loop and runs on sm_90a, CeFwdCta otherwise).

// The forward's CTA type: the Hopper loop where asked for and available, the portable one
// otherwise (a module compiled for sm_80 or sm_90 without the 'a' features).
template <bool kSm90Loop>
struct CeFwdCtaOf {
  typedef CeFwdCta type;
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <>
struct CeFwdCtaOf<true> {
  typedef CeFwdWsCta type;
};
#endif

// Merges (m2, s2) into (m, s): s counts exp(x - m).
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  float mn = fmaxf(m, m2);
  if (mn == neg_inf()) return;
  s = s * fast_exp2((m - mn) * kLog2e) + s2 * fast_exp2((m2 - mn) * kLog2e);
  m = mn;
}

// The forward on CTA type Cta. Thread-local row r is accumulator fragment r / 2, half r % 2;
// a thread's columns span kParts tile_max parts of 64 columns (kNIPart n8 groups each), the first
// being part col(0) / 64. The row statistics are reduced across the quad, then across the
// Cta::kWarpsN column warps through shared memory reused after the loop.
template <class Prog, class Args, bool kF16, class Cta>
__device__ __forceinline__ void linear_ce_fwd_tiles(const Args& args, const CeFwdParams& p,
                                                    const CeFwdMaps& maps) {
  constexpr int kRows = 2 * Cta::kMI;
  constexpr int kParts = Cta::kNI * 8 / 64, kNIPart = Cta::kNI / kParts;
  static_assert(kParts >= 1 && Cta::kNI % kParts == 0, "whole 64-column parts per thread");
  // The Hopper loop's swizzle patterns start on 1024-byte boundaries (its own name: the other
  // kernels' declarations of the dynamic block ask for 128).
  extern __shared__ __align__(1024) u16 fwd_smem[];
  u16* smem = fwd_smem;

  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const FwdGridTile at = fwd_grid_tile(p.row_group, 1);
  const int row0 = at.row_tile * kFwdRows;
  const int t_begin = at.split * p.tiles_per_split;
  const int t_end = min(L.num_tiles, t_begin + p.tiles_per_split);
  const int ksteps = (R.dim + Cta::kK - 1) / Cta::kK;
  const int lane = threadIdx.x & 31, wn = Cta::col_warp(), part0 = Cta::col(0) / 64;

  int krow[kRows], orig[kRows], tgt[kRows];
  float m[kRows], s[kRows], zs[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    krow[r] = row0 + Cta::row(r >> 1, r & 1);
    bool ok = krow[r] < R.n_kept;
    orig[r] = ok ? R.kept[krow[r]] : 0;
    tgt[r] = ok ? R.targets[orig[r]] : -1;
    m[r] = neg_inf();
    s[r] = 0.f;
    zs[r] = 0.f;
  }
  const LogitHooks<Prog, Args, false> hooks(args);  // logit_mod's constant part

  // Whether the Hopper loop brings segment si's weight tile as a TMA box: rows in position order
  // (no order, or the runtime's copy in that order).
  auto weight_box = [&](int si) {
    return !L.seg[si].order || ((p.weights_in_position_order >> si) & 1);
  };
  // A segment with an order: this thread's weight rows of the tile being loaded, read once per
  // tile (the steps come in order).
  GatheredRows<kTileIds, Cta::kLoadThreads> wrows;
  int wrows_tile = -1;
  auto load = [&](u16* a_tile, u16* b_tile, int step) {
    int tile = t_begin + step / ksteps, k0 = (step % ksteps) * Cta::kK;
    const int si = tile_segment(L, tile);
    const CeSegment& S = L.seg[si];
    int lbase = (tile - S.first_tile) * kTileIds;
    if (!Cta::kWarpSpecialized)  // the Hopper loop's A tile comes by TMA (load_boxes)
      load_kmajor<kFwdRows, Cta::kLoadThreads>(
          a_tile,
          CeOperand{R.hidden + row0 * R.hidden_stride + k0, R.hidden_stride, R.n_kept - row0,
                    R.dim - k0},
          Cta::load_thread());
    const CeOperand w = weight_rows(S, lbase, k0, R.dim - k0);
    if (Cta::kWarpSpecialized && (!w.gather || weight_box(si)))
      return;  // the Hopper loop's TMA brings it
    if (w.gather) {
      if (tile != wrows_tile) {
        wrows.read(w.gather, w.rows, Cta::load_thread());
        wrows_tile = tile;
      }
      load_kmajor<kTileIds, Cta::kLoadThreads>(b_tile, w, wrows, Cta::load_thread());
    } else {
      load_kmajor<kTileIds, Cta::kLoadThreads>(b_tile, w, Cta::load_thread());
    }
  };

  // The epilogue of a vocabulary tile. Everything that depends on the column alone (in range, weight
  // row, id, bias) is computed once per column for all the thread's rows; the segment's fields
  // are read into registers once per tile (a store may alias them otherwise and they would be
  // re-read per logit); the hook runs on every logit without a branch (hooks are total) and the
  // in-range select only on a segment's last, partial tile; rows past the kept ones compute
  // values nobody stores. The target is found by position (its column in this tile, from the
  // segment's rank): the few threads holding it store it and take it out of its tile_max part
  // apart from the per-logit work. The logits overwrite the accumulators, which the next tile's
  // first products overwrite in turn.
  auto tile_done = [&](int ti, typename Cta::Acc& acc) {
    const int tile = t_begin + ti;
    const CeSegment& S = L.seg[tile_segment(L, tile)];
    const int* const order = S.order;
    const u16* const bias = S.bias;
    const int seg_begin = S.begin, seg_size = S.size;
    const int lbase = (tile - S.first_tile) * kTileIds;
    const int col0 = lbase + Cta::col(0);  // this thread's column ni * 8 + e is col0 + ni * 8 + e
    const int cols_in = seg_size - col0;    // ... in range when ni * 8 + e < cols_in
    typename LogitHooks<Prog, Args, false>::Row at[kRows];
    float zmax[kRows], tmax[kRows][kParts];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      at[r] = hooks.at_row(orig[r]);
      zmax[r] = neg_inf();
#pragma unroll
      for (int q = 0; q < kParts; ++q) tmax[r][q] = neg_inf();
    }
    // Inlined four times: partial and with_bias are constants in each (a tile without a bias
    // adds nothing to its logits). The row's maximum is its parts' maximum, taken after the loop.
    auto logits = [&](bool partial, bool with_bias) {
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = ni * 8 + e;
          const bool col_ok = !partial || c < cols_in;
          const int pos = col0 + c;
          const int wrow = col_ok && order ? order[pos] : pos, id = seg_begin + wrow;
          const float b = col_ok && with_bias ? to_float<kF16>(bias[wrow]) : 0.f;
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float& a = acc[r >> 1][ni][(r & 1) * 2 + e];
            const float mod = at[r].mod(with_bias ? a + b : a, id);
            const float v = col_ok ? mod : neg_inf();
            tmax[r][ni / kNIPart] = fmaxf(tmax[r][ni / kNIPart], v);
            a = v;
          }
        }
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int q = 0; q < kParts; ++q) zmax[r] = fmaxf(zmax[r], tmax[r][q]);
    };
    // The target of each row: its column relative to col0 when this thread holds it. Read
    // before the logits overwrite the accumulators.
    int tcol[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int rel = tgt[r] - seg_begin;
      tcol[r] = -1;
      if (krow[r] < R.n_kept && rel >= 0 && rel < seg_size) {
        const int c = seg_position(S, rel) - col0;
        if (c >= 0 && c < 8 * Cta::kNI && (c & 7) < 2) {
          tcol[r] = c;
          float x = 0.f;
#pragma unroll
          for (int ni = 0; ni < Cta::kNI; ++ni)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (ni * 8 + e == c) x = acc[r >> 1][ni][(r & 1) * 2 + e];
          if (bias) x += to_float<kF16>(bias[rel]);
          p.target_logit[krow[r]] = at[r].mod(x, tgt[r]);
          p.target_raw[krow[r]] = x;
        }
      }
    }
    const bool full = cols_in >= 8 * Cta::kNI;
    if (full && !bias)
      logits(false, false);
    else if (full)
      logits(false, true);
    else if (!bias)
      logits(true, false);
    else
      logits(true, true);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int mi = r >> 1, h = r & 1;
      if (tcol[r] >= 0 && p.tile_max) {  // the target's part without it
        float t = neg_inf();
#pragma unroll
        for (int ni = 0; ni < Cta::kNI; ++ni)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (ni / kNIPart == tcol[r] / 8 / kNIPart && ni * 8 + e != tcol[r])
              t = fmaxf(t, acc[mi][ni][h * 2 + e]);
#pragma unroll
        for (int q = 0; q < kParts; ++q) tmax[r][q] = q == tcol[r] / 8 / kNIPart ? t : tmax[r][q];
      }
      if (p.part_zsum)  // label smoothing: the sum of the row's logits in range
#pragma unroll
        for (int ni = 0; ni < Cta::kNI; ++ni)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (ni * 8 + e < cols_in) zs[r] += acc[mi][ni][h * 2 + e];
      const float mn = fmaxf(m[r], zmax[r]);
      if (mn != neg_inf()) {
        float acc_s = 0.f, mn2 = mn * kLog2e;
#pragma unroll
        for (int ni = 0; ni < Cta::kNI; ++ni)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            acc_s += fast_exp2(fmaf(acc[mi][ni][h * 2 + e], kLog2e, -mn2));
        s[r] = s[r] * fast_exp2((m[r] - mn) * kLog2e) + acc_s;
        m[r] = mn;
      }
      if (p.tile_max) {  // a part's 64 columns: across the quad, then one lane stores
#pragma unroll
        for (int q = 0; q < kParts; ++q) {
          float t = tmax[r][q];
          t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, 1));
          t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, 2));
          if ((lane & 3) == 0 && krow[r] < R.n_kept)
            p.tile_max[((long long)tile * kTileMaxParts + part0 + q) * R.n_kept + krow[r]] =
                bf16_bits_rounded_up(t);
        }
      }
    }
  };

  // The Hopper loop's TMA copies of a step: the A tile (kFwdRows kept rows by 64 columns) and,
  // unless the segment's rows are gathered, the B tile (kTileIds weight rows in position order);
  // one arrival with the bytes.
  auto load_boxes = [&](u32 a_tile, u32 full, int step) {
    const int tile = t_begin + step / ksteps, k0 = (step % ksteps) * Cta::kK;
    const int si = tile_segment(L, tile);
    const CeSegment& S = L.seg[si];
    const bool b_box = weight_box(si);
    tjk::mbar_arrive_expect_tx(full, (kFwdRows + (b_box ? kTileIds : 0)) * 128);
    tjk::tma_load_2d(a_tile, &maps.hidden, k0, row0, full);
    if (b_box)
      tjk::tma_load_2d(a_tile + Cta::kAElems * 2, &maps.weight[si], k0,
                       (tile - S.first_tile) * kTileIds, full);
  };

  // Every segment's weight tiles as TMA boxes: the Hopper loop's other loading threads have
  // nothing to copy.
  bool all_boxes = true;
  for (int si = 0; si < L.num_segments; ++si) all_boxes = all_boxes && weight_box(si);

  typename Cta::Acc acc;
  int steps = t_end > t_begin ? (t_end - t_begin) * ksteps : 0;
  if (!ce_gemm_loop<Cta, kF16, true, true>(smem, steps, ksteps, load, tile_done, acc,
                                           load_boxes, all_boxes))
    return;  // a loading warpgroup (CeWsCta): done

  // Row partials: across the 4 lanes of a quad, then across the column warps (the loop has
  // drained: its shared memory is free).
  float(*red)[Cta::kWarpsN][kFwdRows] = reinterpret_cast<float(*)[Cta::kWarpsN][kFwdRows]>(smem);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
      float m2 = __shfl_xor_sync(0xffffffffu, m[r], o);
      float s2 = __shfl_xor_sync(0xffffffffu, s[r], o);
      zs[r] += __shfl_xor_sync(0xffffffffu, zs[r], o);
      lse_merge(m[r], s[r], m2, s2);
    }
    if ((lane & 3) == 0) {
      const int row = Cta::row(r >> 1, r & 1);
      red[0][wn][row] = m[r];
      red[1][wn][row] = s[r];
      red[2][wn][row] = zs[r];
    }
  }
  if constexpr (Cta::kWarpSpecialized)
    tjk::named_barrier_sync(1, Cta::kComputeThreads);  // the loaders have left
  else
    __syncthreads();
  for (int r = threadIdx.x; r < kFwdRows; r += Cta::kComputeThreads) {
    if (row0 + r >= R.n_kept) break;
    float mm = red[0][0][r], ss = red[1][0][r], zz = red[2][0][r];
#pragma unroll
    for (int w = 1; w < Cta::kWarpsN; ++w) {  // column warps in a fixed order
      lse_merge(mm, ss, red[0][w][r], red[1][w][r]);
      zz += red[2][w][r];
    }
    long long o = (long long)at.split * R.n_kept + row0 + r;
    p.part_max[o] = mm;
    p.part_sum[o] = ss;
    if (p.part_zsum) p.part_zsum[o] = zz;
  }
}

// Launched with CeFwdCtaOf<kSm90Loop>::type's threads (launch bounds: one CTA per SM) and dynamic
// shared memory; `maps` is read by the Hopper loop only.
template <class Prog, class Args, bool kF16, bool kSm90Loop = false>
__device__ __forceinline__ void linear_ce_fwd(const Args& args, const CeFwdParams& p,
                                              const CeFwdMaps& maps) {
  linear_ce_fwd_tiles<Prog, Args, kF16, typename CeFwdCtaOf<kSm90Loop>::type>(args, p, maps);
}

struct CeMergeParams {
  CeKlMerge kl;  // the KL term's partials and results (kl.cross nullptr: no KL term)
  const float* part_max = nullptr;
  const float* part_sum = nullptr;
  const float* part_zsum = nullptr;  // nullptr: no smoothing
  const float* target_logit = nullptr;
  const int* slot = nullptr;   // [n_rows] kept index or -1
  float* lse = nullptr;        // [n_kept]
  float* row_loss = nullptr;   // [n_kept]
  float* loss_rows = nullptr;  // [n_rows] (reduction none) or nullptr; ignored rows get 0
  int n_rows = 0, n_kept = 0, splits = 1, live_ids = 1;
  float label_smoothing = 0.f, z_loss = 0.f;
};

// linear_ce_merge's blocks: 32 rows (a warp's lanes, so every load is one coalesced line) by
// kMergeWarps warps, each over every kMergeWarps-th split; 256 threads, ceil(n_rows / 32) blocks.
// One thread per row walking all splits twice left most SMs idle on dependent loads (0.27 ms of
// a Gemma-2 forward's 500 splits).
constexpr int kMergeRows = 32, kMergeWarps = 8;

// A partial log-sum-exp over some of a row's splits: their max, the sum of their sums rescaled to
// it and a `scaled` quantity summed alike.
struct SplitMerge {
  float mx, sum, extra;
};

// Kept row k's merge over all splits (partials max and sum of exp(x - max), `scaled` when given),
// by the whole block: warp w takes splits w, w + kMergeWarps, ... in order, then the warps' parts
// are combined in warp order (fixed: deterministic). Every thread calls it (it synchronises);
// lanes of rows that are not kept pass `row_ok` false and get an empty merge.
__device__ __forceinline__ SplitMerge merge_splits(const float* part_max, const float* part_sum,
                                                   const float* scaled, int splits, int n_kept,
                                                   int k, bool row_ok) {
  __shared__ SplitMerge parts[kMergeWarps][kMergeRows];
  const int warp = threadIdx.x / kMergeRows, lane = threadIdx.x % kMergeRows;
  SplitMerge m{neg_inf(), 0.f, 0.f};
  if (row_ok) {
    for (int sp = warp; sp < splits; sp += kMergeWarps)
      m.mx = fmaxf(m.mx, part_max[(long long)sp * n_kept + k]);
    for (int sp = warp; sp < splits; sp += kMergeWarps) {
      const long long o = (long long)sp * n_kept + k;
      const float pm = part_max[o];
      if (pm == neg_inf()) continue;
      const float w = expf(pm - m.mx);
      m.sum += part_sum[o] * w;
      if (scaled) m.extra += scaled[o] * w;
    }
  }
  parts[warp][lane] = m;
  __syncthreads();
  SplitMerge t{neg_inf(), 0.f, 0.f};
  for (int w = 0; w < kMergeWarps; ++w) t.mx = fmaxf(t.mx, parts[w][lane].mx);
  for (int w = 0; w < kMergeWarps; ++w) {
    const SplitMerge& part = parts[w][lane];
    if (part.mx == neg_inf()) continue;
    const float r = expf(part.mx - t.mx);
    t.sum += part.sum * r;
    t.extra += part.extra * r;
  }
  __syncthreads();  // `parts` is reused by the next merge
  return t;
}

// Kept row k's plain sum over the splits of `part`, by the whole block as merge_splits.
__device__ __forceinline__ float sum_splits(const float* part, int splits, int n_kept, int k,
                                            bool row_ok) {
  __shared__ float parts[kMergeWarps][kMergeRows];
  const int warp = threadIdx.x / kMergeRows, lane = threadIdx.x % kMergeRows;
  float s = 0.f;
  if (row_ok)
    for (int sp = warp; sp < splits; sp += kMergeWarps) s += part[(long long)sp * n_kept + k];
  parts[warp][lane] = s;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < kMergeWarps; ++w) t += parts[w][lane];
  __syncthreads();
  return t;
}

// Blocks of kMergeRows original rows x kMergeWarps warps: per row, the split partials combined
// into lse and the row loss (the first warp writes them).
__device__ __forceinline__ void linear_ce_merge(const CeMergeParams& q) {
  const int i = blockIdx.x * kMergeRows + threadIdx.x % kMergeRows;
  const int k = i < q.n_rows ? q.slot[i] : -1;
  const bool row_ok = k >= 0;
  const SplitMerge m =
      merge_splits(q.part_max, q.part_sum, nullptr, q.splits, q.n_kept, k, row_ok);
  const float lse = m.mx + logf(m.sum);
  const float zsum = q.part_zsum ? sum_splits(q.part_zsum, q.splits, q.n_kept, k, row_ok) : 0.f;
  const CeKlMerge& K = q.kl;
  SplitMerge tempered{}, teacher{};
  if (K.cross) {  // (uniform: a parameter)
    tempered = merge_splits(K.tempered_max, K.tempered_sum, nullptr, q.splits, q.n_kept, k, row_ok);
    teacher = merge_splits(K.teacher_max, K.teacher_sum, K.cross, q.splits, q.n_kept, k, row_ok);
  }
  if (threadIdx.x >= kMergeRows || i >= q.n_rows) return;
  if (!row_ok) {
    if (q.loss_rows) q.loss_rows[i] = 0.f;
    return;
  }
  float eps = q.label_smoothing;
  float ce = (1.f - eps) * (lse - q.target_logit[k]);
  if (q.part_zsum) ce += eps * (lse - zsum / (float)q.live_ids);
  float loss = (1.f - K.alpha) * ce + q.z_loss * lse * lse;
  if (K.cross) {  // alpha T^2 KL(pt || q) = alpha T^2 (sum_v pt_v (t_v - z_v) / T - teacher + tempered)
    const float tempered_lse = tempered.mx + logf(tempered.sum);
    const float teacher_lse = teacher.mx + logf(teacher.sum);
    K.tempered_lse[k] = tempered_lse;
    K.teacher_lse[k] = teacher_lse;
    float kl = teacher.extra * expf(teacher.mx - teacher_lse) - teacher_lse + tempered_lse;
    loss += K.alpha * K.temperature * K.temperature * kl;
  }
  q.lse[k] = lse;
  q.row_loss[k] = loss;
  if (q.loss_rows) q.loss_rows[i] = loss;
}

// One block of 1024 threads: out[0] = sum (reduction sum) or mean (reduction mean) of
// row_loss[0..n). Fixed summation order: deterministic run to run.
__device__ __forceinline__ void linear_ce_reduce(const float* row_loss, int n, int reduction,
                                                 float* out) {
  __shared__ double part[1024];
  double acc = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += row_loss[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    out[0] = (float)(reduction == kReduceMean ? (n > 0 ? part[0] / n : 0.0) : part[0]);
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
template <class Prog, class Args, bool kF16, bool kSm90Loop = false>
__global__ void __launch_bounds__(CeFwdCtaOf<kSm90Loop>::type::kThreads, 1)
    linear_ce_fwd_kernel(const __grid_constant__ Args args, const __grid_constant__ CeFwdParams p,
                         const __grid_constant__ CeFwdMaps maps) {
  linear_ce_fwd<Prog, Args, kF16, kSm90Loop>(args, p, maps);
}
__global__ void linear_ce_merge_kernel(const __grid_constant__ CeMergeParams q) {
  linear_ce_merge(q);
}
__global__ void __launch_bounds__(1024)
    linear_ce_reduce_kernel(const float* row_loss, int n, int reduction, float* out) {
  linear_ce_reduce(row_loss, n, reduction, out);
}
#endif

}  // namespace tilejit_ce
