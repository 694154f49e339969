// The element passes of the Hopper attention backward (attention_bwd_sm90.cuh): P^T and dS^T
// from S^T and dP^T in a consumer's accumulator layout, with the program's hooks (mask_mod,
// score_mod, score_grad, computed from their q and kv parts, which the caller prepares while
// the products run: hook_parts.cuh) as the portable kernel's apply_bwd applies them.
#pragma once

#include "attention_bwd.cuh"

namespace tjk {

// Where a consumer's S^T / dP^T tile sits: rows kv = row0 (+ 8), columns q = col0 + 8n (+ 1).
struct BwdSm90Tile {
  const AttnShape& sh;
  float scale_log2;
  int b, h, row0, col0;
};

// The element pass over S^T and dP^T (see attention_bwd.cuh's apply_bwd for the formulas):
// p = the bf16 / f16 P as A fragments (k16 slice kk = column groups 2kk and 2kk + 1), and
// dS = P * score_grad * (dP - delta) into f likewise; score_grad runs only where P > 0 (or,
// where it reads score, next to score_mod where the mask holds: element_probability), so hooks
// only run where the mask holds.
// lse2(n, c) is the log2-domain lse of the element's column, delta(n, c) its delta.
// kp: the hooks' parts of the two kv rows; col_parts(n).at[j]: those of q column
// col0 + 8 n + j (hook_parts.cuh; they may hold more than this pass reads).
// kSplit: P only (dP may still be in flight), with P * score_grad left in s for
// attn_bwd_sm90_gradients; f and dp are not touched.
template <class Prog, class Args, class T, bool kMask, bool kBounds, bool kSplit, int kN,
          class RowParts, class ColPartsOf, class Lse2, class Delta>
__device__ __forceinline__ void attn_bwd_sm90_probabilities(
    float (&s)[kN][4], float (&dp)[kN][4], unsigned (&p)[kN / 2][4], unsigned (&f)[kN / 2][4],
    const Args& args, const BwdSm90Tile& t, const RowParts (&kp)[2], ColPartsOf col_parts,
    Lse2 lse2, Delta delta) {
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    const auto& qp = col_parts(n).at;
    float pr[4], ds[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int kv = t.row0 + (c >> 1) * 8, q = t.col0 + n * 8 + (c & 1);
      float g;  // P * score_grad
      pr[c] = element_probability<Prog, Args, kMask, kBounds>(
          args, qp[c & 1], kp[c >> 1], s[n][c], t.sh.scale, t.scale_log2, t.b, t.h, q, kv,
          t.sh.seq_q, t.sh.seq_kv, lse2(n, c), g);
      if (kSplit)
        s[n][c] = g;
      else
        ds[c] = g * (dp[n][c] - delta(n, c));
    }
    p[n >> 1][2 * (n & 1)] = ElemOps<T>::pack(pr[0], pr[1]);
    p[n >> 1][2 * (n & 1) + 1] = ElemOps<T>::pack(pr[2], pr[3]);
    if (!kSplit) {
      f[n >> 1][2 * (n & 1)] = ElemOps<T>::pack(ds[0], ds[1]);
      f[n >> 1][2 * (n & 1) + 1] = ElemOps<T>::pack(ds[2], ds[3]);
    }
  }
}

// The second half of a split pass: dS = (P * score_grad, in g) * (dP - delta) into f.
template <class T, int kN, class Delta>
__device__ __forceinline__ void attn_bwd_sm90_gradients(const float (&g)[kN][4],
                                                        const float (&dp)[kN][4],
                                                        unsigned (&f)[kN / 2][4], Delta delta) {
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    float ds[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) ds[c] = g[n][c] * (dp[n][c] - delta(n, c));
    f[n >> 1][2 * (n & 1)] = ElemOps<T>::pack(ds[0], ds[1]);
    f[n >> 1][2 * (n & 1) + 1] = ElemOps<T>::pack(ds[2], ds[3]);
  }
}

// The cheapest variant of the probabilities pass, as tile_bwd picks for the portable kernel, on
// the parts its caller computed: held[i] = the q columns' (col0 - 2 t) + lane + 32 i, with the
// mask's when the tile is not full (compute_held_columns, hook_parts.cuh).
template <class Prog, class Args, class T, bool kSplit, int kN, class RowParts, class ColParts,
          int kHeld, class Lse2, class Delta>
__device__ __forceinline__ void attn_bwd_sm90_tile_probabilities(
    float (&s)[kN][4], float (&dp)[kN][4], unsigned (&p)[kN / 2][4], unsigned (&f)[kN / 2][4],
    const Args& args, const BwdSm90Tile& t, bool full, bool interior, const RowParts (&kp)[2],
    const ColParts (&held)[kHeld], Lse2 lse2, Delta delta) {
  static_assert(kN == 4 * kHeld, "32 columns per held part");
  const int first = t.col0 - 2 * (threadIdx.x & 3);  // the step's first q
  const WarpHeldColumns<ColParts, false, kHeld, Args> values{held, args, t.b, t.h, first};
  const WarpHeldColumns<ColParts, true, kHeld, Args> all{held, args, t.b, t.h, first};
  if (full && interior)
    attn_bwd_sm90_probabilities<Prog, Args, T, false, false, kSplit>(s, dp, p, f, args, t, kp,
                                                                     values, lse2, delta);
  else if (full || Prog::kMaskIsTrue)
    attn_bwd_sm90_probabilities<Prog, Args, T, false, true, kSplit>(s, dp, p, f, args, t, kp,
                                                                    values, lse2, delta);
  else
    attn_bwd_sm90_probabilities<Prog, Args, T, true, true, kSplit>(s, dp, p, f, args, t, kp, all,
                                                                   lse2, delta);
}

}  // namespace tjk
