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
// Tiles. The (row tile, vocabulary tile) grid is classified once (linear_ce_classify,
// linear_ce_tiles.cuh) into two bits: kTileHot, some row has exp(max logit - lse) >= threshold
// (with a KL term: or q or pt, from the student's and the teacher's max logits; target excluded;
// threshold 0: every tile), and kTileHoldsTarget, the tile holds the target of some row of the
// row tile. Only hot tiles are visited (recomputed, multiplied); the others are skipped entirely.
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
// and launches no CTA for a pair it skips. Launch shape of the grad kernel: CeGradCta (threads,
// dynamic smem), whichever tile loop runs; grid (the chunk's pairs).
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
  const int* row_list = nullptr;      // [row tiles, num_tiles]: visited vocab tiles, ascending
  const int* row_count = nullptr;     // [row tiles]
  const int* col_list = nullptr;      // [num_tiles, row tiles]: visited row tiles, ascending
  const int* col_count = nullptr;     // [num_tiles]
  const int* pair_rank = nullptr;     // [row tiles, num_tiles]: a visited pair's place in its tile
  const int* pair_first = nullptr;    // [num_tiles + 1]: the first pair of each tile
  const int* staged_first = nullptr;  // [num_tiles + 1]: the staged tiles before each tile
  const int2* pair_list = nullptr;    // [pairs]: (tile, row tile)
  u16* grad = nullptr;                // G: the chunk's pairs' 128 x 128 blocks
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

// Grid (the chunk's pairs); CeGradCta::kThreads threads (launch bounds: two CTAs per SM;
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
  const int block = blockIdx.x;
  const int2 pair = p.pair_list[p.pair_first[p.chunk_first] + block];
  const int tile = pair.x, rt = pair.y;
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
  store_grad_tile(p, stage, block);
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
  p.target_grad[k] =
      grad_entry<kKl>(grad_row_terms<kKl>(p, k), !(Prog::kLogitIsIdentity && p.weight_colsum),
                      p.target_logit[k], tz, lg, true);
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
#endif

}  // namespace tilejit_ce
