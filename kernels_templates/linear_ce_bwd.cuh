// Fused linear cross-entropy, backward: dE and dC_s (and dbias) from the forward's lse.
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
// Tiles. The (row tile, vocabulary tile) grid is classified once (linear_ce_classify,
// linear_ce_tiles.cuh) into two
// bits: kTileHot, some row has exp(max logit - lse) >= threshold (with a KL term: or q or pt,
// from the student's and the teacher's max logits; target excluded; threshold 0: every tile), and kTileHoldsTarget, the tile holds the target of some row of the row tile. Only
// hot tiles are visited (recomputed, multiplied); the others are skipped entirely.
// Target entries: in a hot tile a target's entry is part of G like any other. A target whose
// tile is not hot for its row tile is a sparse correction instead (linear_ce_target_grad computes
// its fp32 entry t_k): dE_k += t_k C[target], dC[target] += t_k E_k, dbias[target] += t_k. So a
// target alone never makes a tile survive: a tile survives only if its probabilities do.
// The uniform smoothing term -eps/L is handled analytically when logit_mod is the identity
// (dE_r -= g_r eps/L sum_v C_v, dC_v -= eps/L sum_r g_r E_r), so it never keeps a tile alive;
// with another logit_mod it is part of every visited tile, and filtering should be off.
// Tiles are tiles of positions of a segment's vocabulary order (linear_ce_common.cuh): weight
// rows are gathered through it, and dC / dbias rows are written to the weights' own rows.
//
// Work is done per vocabulary chunk (a run of tiles) through a bounded bf16/fp16 staging buffer
// for G (rows padded to 128, chunk columns): for each chunk
//   linear_ce_grad     recomputes hot tiles (tensor cores) and writes G;
//   linear_ce_dhidden  dE[row tile, d tile] (+)= G[row tile, chunk] . C[chunk, d tile]
//                      over the row tile's visited vocabulary tiles (the first chunk also adds
//                      the smoothing and target corrections);
//   linear_ce_dweight  dC[vocab tile, d tile] = G[:, vocab tile]^T . E[:, d tile] over
//                      the vocabulary tile's visited row tiles, then its target corrections;
//   linear_ce_dbias    column sums of G, plus target corrections.
// Every output element has exactly one writer and a fixed summation order: results are
// bit-identical run to run without atomics.
// Launch shapes: grad kernel CeGradCta (threads, dynamic smem), whichever tile loop runs;
// dhidden / dweight CeProductCtaOf<kSm90Loop>::type's (CeProductCta, or the warp-specialised
// CeProductWsCta where the module asks for the Hopper loop, ce_wgmma.cuh, with kSm90Loop and is
// compiled for sm_90a: 384 threads, 192 KiB); chunk_tiles <= 1024. Outputs are fp32; dE rows of
// ignored rows are zeroed by linear_ce_row_grad, every dC row and dbias entry is written by this
// pass.
#pragma once

#include "ce_wgmma.cuh"
#include "linear_ce_common.cuh"
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
  const int* row_list = nullptr;   // [row tiles, num_tiles]: visited vocab tiles, ascending
  const int* row_count = nullptr;  // [row tiles]
  const int* col_list = nullptr;   // [num_tiles, row tiles]: visited row tiles, ascending
  const int* col_count = nullptr;  // [num_tiles]
  u16* grad = nullptr;             // staging G: [row tiles * 128, chunk_tiles * 128]
  long long grad_stride = 0;
  float* d_hidden = nullptr;  // [n_rows, dim] fp32 (original rows)
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

template <bool kKl>
__device__ __forceinline__ GradRowTerms grad_row_terms(const CeBwdParams& p, int k) {
  GradRowTerms t;
  t.lse = p.lse[k];
  t.prob_weight = p.prob_weight + 2.f * p.z_loss * t.lse;
  t.target_weight = p.target_weight;
  t.uniform = p.uniform;
  t.row_grad = p.row_grad[k];
  if (kKl) {
    t.kl_weight = p.kl.weight;
    t.inv_t = p.kl.teacher.inv_temperature;
    t.tempered_lse = p.kl.tempered_lse[k];
    t.teacher_lse = p.kl.teacher_lse[k];
  }
  return t;
}

// G's entry at (kept row k, id) from its row's terms, z = logit_mod(x), (KL) the teacher's
// modded logit tz and lg = d logit_mod / d logit at the raw logit x. `subtract_uniform`: the
// smoothing term is not applied analytically (weight_colsum) for this program.
template <bool kKl>
__device__ __forceinline__ float grad_entry(const GradRowTerms& t, bool subtract_uniform, float z,
                                            float tz, float lg, bool is_target) {
  float pr = fast_exp2((z - t.lse) * kLog2e);
  float gd = pr * t.prob_weight - (is_target ? t.target_weight : 0.f);
  if (subtract_uniform) gd -= t.uniform;
  if (kKl) {
    float q = fast_exp2((z * t.inv_t - t.tempered_lse) * kLog2e);
    float pt = fast_exp2((tz * t.inv_t - t.teacher_lse) * kLog2e);
    gd += t.kl_weight * (q - pt);
  }
  return t.row_grad * gd * lg;
}

// Copies the staged 128 x 128 G tile to the staging buffer (16-byte stores).
__device__ __forceinline__ void store_grad_tile(const CeBwdParams& p, const u16* stage, int rt,
                                                int ct) {
  for (int c = threadIdx.x; c < kTileRows * 16; c += blockDim.x) {
    int r = c >> 4, ch = c & 15;
    uint4 v = *reinterpret_cast<const uint4*>(stage + r * kStageStride + ch * 8);
    *reinterpret_cast<uint4*>(p.grad + (long long)(rt * kTileRows + r) * p.grad_stride +
                              ct * kTileIds + ch * 8) = v;
  }
}

// The gradient tile's Hopper CTA: CeGradCta's shape, threads and shared memory, as two
// warpgroups of 64 x 128 (ce_wgmma.cuh); used where the module asks for it (kSm90Loop) and is
// compiled for sm_90a, never with kKl. ptxas (CUDA 13.0, sm_90a, gemma2_softcap module): 111
// registers (two CTAs per SM), no spills, 4 HGMMA 64x128x16 per K step (the portable loop: 125).
typedef CeWgCta<kTileRows, kTileIds, 3> CeGradWgCta;
static_assert(CeGradWgCta::kThreads == CeGradCta::kThreads &&
                  CeGradWgCta::kSmemBytes == CeGradCta::kSmemBytes,
              "both gradient loops launch alike");
template <bool kSm90Loop>
struct CeGradCtaOf {
  typedef CeGradCta type;
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <>
struct CeGradCtaOf<true> {
  typedef CeGradWgCta type;
};
#endif

// Grid (row tiles, chunk tiles); CeGradCta::kThreads threads (launch bounds: two CTAs per SM;
// one with kKl, whose second GEMM recomputes the teacher's tile: ks = max(ceil(D / 64),
// ceil(D_t / 64)) K steps each, as in linear_ce_fwd_kl).
template <class Prog, class Args, bool kF16, bool kKl = false, bool kSm90Loop = false>
__device__ __forceinline__ void linear_ce_grad(const Args& args, const CeBwdParams& p) {
  typedef typename CeGradCtaOf<kSm90Loop && !kKl>::type Cta;
  extern __shared__ __align__(1024) u16 grad_smem[];  // 1024: the Hopper loop's swizzle patterns
  u16* smem = grad_smem;
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const CeTeacher& T = p.kl.teacher;
  const int rt = blockIdx.x, ct = blockIdx.y, tile = p.chunk_first + ct;
  if (!(p.tile_class[(long long)rt * L.num_tiles + tile] & kTileHot)) return;
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
    ce_gemm_loop<Cta, kF16, true, true>(smem, 2 * ksteps, ksteps, load, keep, acc);
    copy_acc(student, acc);
  } else {  // one tile: the accumulators stay as they are at the end
    ce_gemm_loop<Cta, kF16, true, true>(smem, ksteps, 1 << 30, load, KeepAccumulators(), acc);
  }
  // With the Hopper loop, ptxas (CUDA 13.0) serialises every product (C7515: "non wgmma
  // instructions defining accumulator registers") unless the epilogue starts a new region; a
  // barrier that exits nowhere is enough. Check `ptxas -v` when touching this.
  if (Cta::kWgmma && !__syncthreads_or(1)) return;

  // The hooks' constant parts once, after the products (no registers held across their loop);
  // their row parts and the row's terms once per row; the segment's fields in registers (read
  // through S per entry they would be re-read after every store).
  const LogitHooks<Prog, Args, true> hooks(args);
  const bool subtract_uniform = !(Prog::kLogitIsIdentity && p.weight_colsum);
  const int* const order = S.order;
  const u16* const bias = S.bias;
  const u16* const teacher_bias = kKl ? T.layout.seg[s].bias : nullptr;
  const int seg_begin = S.begin;
  const int col0 = lbase + Cta::col(0);  // this thread's column ni * 8 + e is col0 + ni * 8 + e
  const int cols_in = S.size - col0;     // ... in range when ni * 8 + e < cols_in
#pragma unroll
  for (int mi = 0; mi < Cta::kMI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = Cta::row(mi, h), k = row0 + r;
      const bool row_ok = k < R.n_kept;
      const int orig = row_ok ? R.kept[k] : 0, tgt = row_ok ? R.targets[orig] : -1;
      const auto at = hooks.at_row(orig);
      const GradRowTerms terms = grad_row_terms<kKl>(p, row_ok ? k : 0);
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni) {
        float g2[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int c = ni * 8 + e;
          g2[e] = 0.f;
          if (row_ok && c < cols_in) {
            const int pos = col0 + c;
            const int wrow = order ? order[pos] : pos, id = seg_begin + wrow;
            float x = acc[mi][ni][h * 2 + e];
            if (bias) x += to_float<kF16>(bias[wrow]);
            const float z = at.mod(x, id);
            float tz = 0.f;
            if (kKl) {
              float xt = teacher[mi][ni][h * 2 + e];
              if (teacher_bias) xt += to_float<kF16>(teacher_bias[wrow]);
              tz = at.mod(xt, id);
            }
            g2[e] = grad_entry<kKl>(terms, subtract_uniform, z, tz, at.grad(x, id), id == tgt);
          }
        }
        *reinterpret_cast<u32*>(stage + r * kStageStride + Cta::col(ni)) =
            pack2<kF16>(g2[0], g2[1]);
      }
    }
  __syncthreads();
  store_grad_tile(p, stage, rt, ct);
}

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
  p.target_grad[k] = grad_entry<kKl>(grad_row_terms<kKl>(p, k),
                                     !(Prog::kLogitIsIdentity && p.weight_colsum),
                                     p.target_logit[k], tz, lg, true);
}

// ---- target corrections ----------------------------------------------------------------------

// Whether kept row k's target entry is a sparse correction: its tile is not hot for the row's
// row tile (so G does not hold it).
__device__ __forceinline__ bool target_is_correction(const CeBwdParams& p, int k) {
  const int tile = p.target_slot[k] / kTileIds;
  return !(p.tile_class[(long long)(k / kTileRows) * p.layout.num_tiles + tile] & kTileHot);
}

// Weight row holding slot `slot` (a live id's place in the tiled vocabulary).
__device__ __forceinline__ const u16* slot_weight_row(const CeLayout& L, int slot) {
  const CeSegment& S = L.seg[tile_segment(L, slot / kTileIds)];
  return S.weight + (long long)seg_row(S, slot - S.first_tile * kTileIds) * S.weight_stride;
}

// A barrier among the threads that compute (after the tile loop, a warp-specialised CTA's
// loading threads have returned).
template <class Cta>
__device__ __forceinline__ void compute_threads_sync() {
  if constexpr (Cta::kWarpSpecialized)
    tjk::named_barrier_sync(2, Cta::kComputeThreads);
  else
    __syncthreads();
}

// add_target_rows_dweight's part for row tile rt, which holds a correction in `tile`: the rows'
// target positions and gradients in shared memory, then thread i's column d of their dC rows.
template <class Cta, bool kF16>
__device__ __forceinline__ void add_target_rows_of_row_tile(const CeBwdParams& p,
                                                            const CeSegment& S, int tile, int rt,
                                                            int d, int* rows, float* grads) {
  const CeRows& R = p.rows;
  // dC rows written by other threads; the previous row tile's lists consumed
  compute_threads_sync<Cta>();
  if (threadIdx.x < kTileRows) {
    const int k = rt * kTileRows + threadIdx.x;
    int row = -1;
    if (k < R.n_kept && p.target_slot[k] / kTileIds == tile)
      row = seg_row(S, p.target_slot[k] - S.first_tile * kTileIds);
    rows[threadIdx.x] = row;
    grads[threadIdx.x] = row >= 0 ? p.target_grad[k] : 0.f;
  }
  compute_threads_sync<Cta>();
  if (d >= R.dim) return;
  for (int r = 0; r < kTileRows; ++r) {
    if (rows[r] < 0) continue;
    const float e = to_float<kF16>(R.hidden[(long long)(rt * kTileRows + r) * R.hidden_stride + d]);
    S.d_weight[(long long)rows[r] * S.d_weight_stride + d] += grads[r] * e;
  }
}

// dC[target_k] += t_k E_k for the rows whose target lies in this tile and is a correction, rows
// in ascending order; thread i owns column d0 + i. Runs after the tile's dC rows are written.
// The row tiles' classes are read kComputeThreads at a time, one load per thread (a load per
// row tile, each after the last, took ~20 us in a vocabulary tile that no row visits).
template <class Cta, bool kF16>
__device__ __forceinline__ void add_target_rows_dweight(const CeBwdParams& p, const CeSegment& S,
                                                        int tile, int d0) {
  static_assert(Cta::kComputeThreads == Cta::kN, "one computing thread per dC column");
  static_assert(Cta::kComputeThreads >= kTileRows, "one computing thread per row of a row tile");
  __shared__ int rows[kTileRows];  // weight row of the row's target in this tile, or -1
  __shared__ float grads[kTileRows];
  __shared__ bool holds[Cta::kComputeThreads];  // per row tile of a batch: a correction here
  const int d = d0 + threadIdx.x;
  for (int rt0 = 0; rt0 < p.num_row_tiles; rt0 += Cta::kComputeThreads) {
    compute_threads_sync<Cta>();  // the previous batch's flags consumed
    const int mine = rt0 + threadIdx.x;
    holds[threadIdx.x] =
        mine < p.num_row_tiles &&
        p.tile_class[(long long)mine * p.layout.num_tiles + tile] == kTileHoldsTarget;
    compute_threads_sync<Cta>();
    const int batch = min(Cta::kComputeThreads, p.num_row_tiles - rt0);
    for (int i = 0; i < batch; ++i)
      if (holds[i]) add_target_rows_of_row_tile<Cta, kF16>(p, S, tile, rt0 + i, d, rows, grads);
  }
}

// dbias at `slot`: the sum of t_k over rows whose target sits there as a correction, in order.
__device__ __forceinline__ float target_bias_correction(const CeBwdParams& p, int slot) {
  const int tile = slot / kTileIds;
  float acc = 0.f;
  for (int rt = 0; rt < p.num_row_tiles; ++rt) {
    if (p.tile_class[(long long)rt * p.layout.num_tiles + tile] != kTileHoldsTarget) continue;
    const int k1 = min(p.rows.n_kept, (rt + 1) * kTileRows);
    for (int k = rt * kTileRows; k < k1; ++k)
      if (p.target_slot[k] == slot) acc += p.target_grad[k];
  }
  return acc;
}

// ---- products ------------------------------------------------------------------------------

// The products' Hopper CTA: CeProductCta's shape (128 x 256 output tiles, K steps of 64) as two
// computing warpgroups of 64 x 256 (ce_wgmma.cuh: per K step and warpgroup 8 wgmma m64n128k16,
// two per k16 slice) and a loading one; used where the module asks for it (kSm90Loop) and is
// compiled for sm_90a. The operands are the portable loop's tiles, read in place:
//   dE = G . C:    A = G[128 rows][64 ids], K-major (load_kmajor); B = C[64 ids][256 dims],
//                  N-major (load_mnmajor, imm-trans-b).
//   dC = G^T . E:  A = G^T, stored as G[64 rows][128 ids], M-major (load_mnmajor, imm-trans-a);
//                  B = E[64 rows][256 dims], N-major (load_mnmajor, imm-trans-b).
// Thread (warpgroup g, warp w, lane 4q + t) holds output rows 64 g + 16 w + q + 8 h and columns
// 8 ni + 2 t (+ 1), ni < 32 (CeWgCta::row / col), which the epilogues read through acc_row /
// acc_col as they do the portable CTA's. Each output element is one thread's fp32 accumulator
// over the visited K steps in list order (within a k16 slice, the tensor core's fixed order):
// bit-identical run to run, no atomics; it differs from the portable loop's only by rounding.
// ptxas (CUDA 13.0, sm_90a, NVRTC products module of examples/programs/gemma2_softcap.tj): 168
// registers at launch (setmaxnreg 56 loading, 224 computing), no spills, no stack, no
// serialisation warning (the portable loop on sm_80: 211 and 222).
// On the Hopper loop the products run warp-specialised (CeWsCta, as the forward): a third
// warpgroup issues the copies into a four-stage ring (192 KiB) and the two computing ones only
// wait, multiply and release; 384 threads (the launch takes the CTA type's threads and memory).
typedef CeWsCta<CeProductCta::kM, CeProductCta::kN, 4> CeProductWsCta;
template <bool kSm90Loop>
struct CeProductCtaOf {
  typedef CeProductCta type;
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <>
struct CeProductCtaOf<true> {
  typedef CeProductWsCta type;
};
#endif

// The products' tensor maps (runtime/LinearCeTma.h), 2-D, 64 x 64 boxes with 128-byte swizzle:
// one box is a 64-row block of a K-major tile or one 64-column panel of an MN-major one, as
// load_kmajor / load_mnmajor lay them out. `grad`: the staged G [row tiles * 128, chunk ids];
// `hidden`: the kept rows of E [n_kept, dim]; `staged`: the chunk's weight rows of segments
// with an order, in visiting order (linear_ce_stage_weights; only dE reads weights); `weight`:
// each segment's rows [size, dim]. Read only by the warp-specialised Hopper loop.
struct CeProductMaps {
  tjk::TmaDescriptor grad, hidden, staged;
  tjk::TmaDescriptor weight[kMaxSegments];
};

// Grid (row tiles, ceil(dim / 256)): dE for the chunk's visited tiles of this row tile.
// CeProductCtaOf<kSm90Loop>::type's threads (launch bounds: one CTA per SM), as for dweight.
template <bool kF16, bool kSm90Loop = false>
__device__ __forceinline__ void linear_ce_dhidden(const CeBwdParams& p, const CeProductMaps& maps) {
  typedef typename CeProductCtaOf<kSm90Loop>::type Cta;
  extern __shared__ __align__(1024) u16 smem[];  // 1024: the Hopper loop's swizzle patterns
  __shared__ int tiles[1024];
  __shared__ int range[2];
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const int rt = blockIdx.x, d0 = blockIdx.y * Cta::kN;
  const int* list = p.row_list + (long long)rt * L.num_tiles;
  if (threadIdx.x == 0) {  // the chunk's part of the ascending list
    int n = p.row_count[rt], lo = 0, hi = n;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (list[mid] < p.chunk_first)
        lo = mid + 1;
      else
        hi = mid;
    }
    int a = lo;
    hi = n;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (list[mid] < p.chunk_first + p.chunk_tiles)
        lo = mid + 1;
      else
        hi = mid;
    }
    range[0] = a;
    range[1] = lo;
  }
  __syncthreads();
  const int a = range[0], count = range[1] - range[0];
  if (count == 0 && !p.first_chunk) return;
  for (int i = threadIdx.x; i < count; i += blockDim.x) tiles[i] = list[a + i];
  __syncthreads();

  auto load = [&](u16* a_tile, u16* b_tile, int step) {
    if (Cta::kWarpSpecialized) return;  // both tiles come by TMA (load_boxes)
    int tile = tiles[step >> 1], half = step & 1;
    const CeSegment& S = L.seg[tile_segment(L, tile)];
    int pos0 = (tile - S.first_tile) * kTileIds + half * 64;
    load_kmajor<kTileRows, Cta::kLoadThreads>(
        a_tile,
        CeOperand{p.grad + rt * kTileRows * p.grad_stride + (tile - p.chunk_first) * kTileIds +
                      half * 64,
                  p.grad_stride, kTileRows, 64},
        Cta::load_thread());
    load_mnmajor<Cta::kN, Cta::kLoadThreads>(b_tile, weight_rows(S, pos0, d0, R.dim - d0),
                                             Cta::load_thread());
  };
  // The Hopper loop's TMA boxes of a step: G's 128 x 64 tile (two boxes) and the weights'
  // 64 x 256 tile (four panels), from the segment's rows or, with an order, from the staged rows
  // (at the step's columns of G: the chunk's tiles in visiting order).
  auto load_boxes = [&](u32 a_tile, u32 full, int step) {
    const int tile = tiles[step >> 1], half = step & 1;
    const int si = tile_segment(L, tile);
    const CeSegment& S = L.seg[si];
    tjk::mbar_arrive_expect_tx(full, (kTileRows + Cta::kN) * 128);
    const int gx = (tile - p.chunk_first) * kTileIds + half * 64;
#pragma unroll
    for (int j = 0; j < kTileRows / 64; ++j)
      tjk::tma_load_2d(a_tile + j * 64 * 128, &maps.grad, gx, rt * kTileRows + 64 * j, full);
    const u32 b_tile = a_tile + Cta::kAElems * 2;
    const bool staged = S.order != nullptr;
    const tjk::TmaDescriptor* b_map = staged ? &maps.staged : &maps.weight[si];
    const int b_row = staged ? gx : (tile - S.first_tile) * kTileIds + half * 64;
#pragma unroll
    for (int j = 0; j < Cta::kN / 64; ++j)
      tjk::tma_load_2d(b_tile + j * 64 * 128, b_map, d0 + 64 * j, b_row, full);
  };
  typename Cta::Acc acc;
  if (!ce_gemm_loop<Cta, kF16, true, false>(smem, 2 * count, 1 << 30, load, KeepAccumulators(),
                                            acc, load_boxes))
    return;  // a loading warpgroup: done
  // The (unspecialised) Hopper loop's products stay asynchronous only if the epilogue starts a
  // new region (see linear_ce_grad).
  if constexpr (Cta::kWgmma && !Cta::kWarpSpecialized)
    if (!__syncthreads_or(1)) return;

  const float smooth = p.uniform;
#pragma unroll
  for (int mi = 0; mi < Cta::kMI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int k = rt * kTileRows + acc_row<Cta>(mi, h);
      if (k >= R.n_kept) continue;
      float* dst = p.d_hidden + (long long)R.kept[k] * p.d_hidden_stride;
      float gs = p.weight_colsum && p.first_chunk ? -p.row_grad[k] * smooth : 0.f;
      // The row's target entry, when it is a sparse correction: dE_k += t_k C[target].
      const bool corrected = p.first_chunk && p.target_grad && target_is_correction(p, k);
      const u16* ct = corrected ? slot_weight_row(L, p.target_slot[k]) : nullptr;
      const float tg = corrected ? p.target_grad[k] : 0.f;
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni) {
        int d = d0 + acc_col<Cta>(ni);
        if (d >= R.dim) continue;
        float2 v = make_float2(acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);
        if (gs != 0.f) {
          v.x += gs * p.weight_colsum[d];
          v.y += gs * p.weight_colsum[d + 1];
        }
        if (ct) {
          v.x += tg * to_float<kF16>(ct[d]);
          v.y += tg * to_float<kF16>(ct[d + 1]);
        }
        float2* o = reinterpret_cast<float2*>(dst + d);
        if (!p.first_chunk) {
          float2 old = *o;
          v.x += old.x;
          v.y += old.y;
        }
        *o = v;
      }
    }
}

// Grid (chunk tiles, ceil(dim / 256)): dC for one vocabulary tile, written once (plus its target
// corrections).
template <bool kF16, bool kSm90Loop = false>
__device__ __forceinline__ void linear_ce_dweight(const CeBwdParams& p, const CeProductMaps& maps) {
  typedef typename CeProductCtaOf<kSm90Loop>::type Cta;
  extern __shared__ __align__(1024) u16 smem[];  // 1024: the Hopper loop's swizzle patterns
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const int ct = blockIdx.x, tile = p.chunk_first + ct, d0 = blockIdx.y * Cta::kN;
  const CeSegment& S = L.seg[tile_segment(L, tile)];
  const int lbase = (tile - S.first_tile) * kTileIds;
  const int* list = p.col_list + (long long)tile * p.num_row_tiles;
  const int count = p.col_count[tile];

  auto load = [&](u16* a_tile, u16* b_tile, int step) {
    if (Cta::kWarpSpecialized) return;  // both tiles come by TMA (load_boxes)
    int k0 = list[step >> 1] * kTileRows + (step & 1) * 64;
    load_mnmajor<kTileIds, Cta::kLoadThreads>(
        a_tile,
        CeOperand{p.grad + k0 * p.grad_stride + ct * kTileIds, p.grad_stride, 64, kTileIds},
        Cta::load_thread());
    load_mnmajor<Cta::kN, Cta::kLoadThreads>(
        b_tile,
        CeOperand{R.hidden + k0 * R.hidden_stride + d0, R.hidden_stride, R.n_kept - k0,
                  R.dim - d0},
        Cta::load_thread());
  };
  // The Hopper loop's TMA boxes of a step: G^T's two 64-column panels and E's four.
  auto load_boxes = [&](u32 a_tile, u32 full, int step) {
    const int k0 = list[step >> 1] * kTileRows + (step & 1) * 64;
    tjk::mbar_arrive_expect_tx(full, (kTileIds + Cta::kN) * 128);
#pragma unroll
    for (int j = 0; j < kTileIds / 64; ++j)
      tjk::tma_load_2d(a_tile + j * 64 * 128, &maps.grad, ct * kTileIds + 64 * j, k0, full);
    const u32 b_tile = a_tile + Cta::kAElems * 2;
#pragma unroll
    for (int j = 0; j < Cta::kN / 64; ++j)
      tjk::tma_load_2d(b_tile + j * 64 * 128, &maps.hidden, d0 + 64 * j, k0, full);
  };
  typename Cta::Acc acc;
  if (!ce_gemm_loop<Cta, kF16, false, false>(smem, 2 * count, 1 << 30, load, KeepAccumulators(),
                                             acc, load_boxes))
    return;  // a loading warpgroup: done
  if constexpr (Cta::kWgmma && !Cta::kWarpSpecialized)  // a new region: as in linear_ce_dhidden
    if (!__syncthreads_or(1)) return;

  const float smooth = p.weight_colsum ? -p.uniform : 0.f;
#pragma unroll
  for (int mi = 0; mi < Cta::kMI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int pos = lbase + acc_row<Cta>(mi, h);
      if (pos >= S.size) continue;
      float* dst = S.d_weight + (long long)seg_row(S, pos) * S.d_weight_stride;
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni) {
        int d = d0 + acc_col<Cta>(ni);
        if (d >= R.dim) continue;
        float2 v = make_float2(acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);
        if (smooth != 0.f) {
          v.x += smooth * p.hidden_wsum[d];
          v.y += smooth * p.hidden_wsum[d + 1];
        }
        *reinterpret_cast<float2*>(dst + d) = v;
      }
    }
  if (p.target_grad) add_target_rows_dweight<Cta, kF16>(p, S, tile, d0);
}

// One thread per position of the chunk: dbias = column sum of G over visited row tiles (in
// order), plus the smoothing and target corrections.
template <bool kF16>
__device__ __forceinline__ void linear_ce_dbias(const CeBwdParams& p) {
  const CeLayout& L = p.layout;
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= p.chunk_tiles * kTileIds) return;
  int tile = p.chunk_first + c / kTileIds;
  const CeSegment& S = L.seg[tile_segment(L, tile)];
  int pos = (tile - S.first_tile) * kTileIds + c % kTileIds;
  if (!S.d_bias || pos >= S.size) return;
  const int* list = p.col_list + (long long)tile * p.num_row_tiles;
  int count = p.col_count[tile];
  float acc = 0.f;
  for (int i = 0; i < count; ++i) {
    const u16* g = p.grad + (long long)list[i] * kTileRows * p.grad_stride + c;
    for (int r = 0; r < kTileRows; ++r) acc += to_float<kF16>(g[r * p.grad_stride]);
  }
  if (p.weight_colsum) acc -= p.uniform * p.grad_sum[0];
  if (p.target_grad) acc += target_bias_correction(p, tile * kTileIds + c % kTileIds);
  S.d_bias[seg_row(S, pos)] = acc;
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
template <class Prog, class Args, bool kF16, bool kSm90Loop = false>
__global__ void __launch_bounds__(CeGradCta::kThreads, 2)
    linear_ce_grad_kernel(const __grid_constant__ Args args,
                          const __grid_constant__ CeBwdParams p) {
  linear_ce_grad<Prog, Args, kF16, false, kSm90Loop>(args, p);
}
template <class Prog, class Args>
__global__ void linear_ce_target_grad_kernel(const __grid_constant__ Args args,
                                             const __grid_constant__ CeBwdParams p) {
  linear_ce_target_grad<Prog, Args>(args, p);
}
template <bool kF16, bool kSm90Loop = false>
__global__ void __launch_bounds__(CeProductCtaOf<kSm90Loop>::type::kThreads, 1)
    linear_ce_dhidden_kernel(const __grid_constant__ CeBwdParams p,
                             const __grid_constant__ CeProductMaps maps) {
  linear_ce_dhidden<kF16, kSm90Loop>(p, maps);
}
template <bool kF16, bool kSm90Loop = false>
__global__ void __launch_bounds__(CeProductCtaOf<kSm90Loop>::type::kThreads, 1)
    linear_ce_dweight_kernel(const __grid_constant__ CeBwdParams p,
                             const __grid_constant__ CeProductMaps maps) {
  linear_ce_dweight<kF16, kSm90Loop>(p, maps);
}
template <bool kF16>
__global__ void linear_ce_dbias_kernel(const __grid_constant__ CeBwdParams p) {
  linear_ce_dbias<kF16>(p);
}
#endif

}  // namespace tilejit_ce
