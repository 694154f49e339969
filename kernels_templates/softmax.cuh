// Per-element score pipeline and the online softmax of the attention kernels. Scores live in
// the log2 domain: x = log2(e) * score_mod(scale * qk), so one ex2.approx gives the
// probability; with an identity score_mod the whole transform is one multiply by
// scale * log2(e). A masked or out-of-range element is x = -inf (probability exactly 0).
#pragma once

#include "hook_parts.cuh"
#include "mma.cuh"

namespace tjk {

constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// Where the tile sits: whether mask_mod must run and whether positions can be out of range.
// score_mod and every buffer read run only at in-range positions where the mask holds (a mask
// reading no buffer is evaluated out of range too, its result discarded); qp and kp are the
// element's q and kv parts of them (hook_parts.cuh), holding at least what this pass reads (the
// mask's when kMask).
// score_mod's logit comes from HookParts::score_log2, its factors folded per row
// (compiler/codegen/ScoreFold.h).
// kUnscaled: the logit divided by score_log2_factor (a program declaring kScoreLog2Factored).
template <class Prog, class Args, bool kMask, bool kBounds, bool kUnscaled = false, class QP,
          class KP>
__device__ __forceinline__ float element_logit(const Args& args, const QP& qp, const KP& kp,
                                               float acc, float scale, float scale_log2, int b,
                                               int h, int q, int kv, int seq_q, int seq_kv) {
  if constexpr (kBounds && kMask && !MaskReadsBuffers<Prog>::value) {
    // A mask that reads no buffer is pure arithmetic, defined at any position: combined with the
    // bounds without branches, it is evaluated out of range too and discarded there. Branch-free,
    // ptxas keeps its params in registers instead of re-reading them under a predicate per element.
    const bool in_range = (q < seq_q) & (kv < seq_kv);
    if (!(in_range & HookParts<Prog>::mask(args, qp.mask, kp.mask, b, h, q, kv))) return neg_inf();
  } else {
    if (kBounds && (q >= seq_q || kv >= seq_kv)) return neg_inf();
    if constexpr (kMask)
      if (!HookParts<Prog>::mask(args, qp.mask, kp.mask, b, h, q, kv)) return neg_inf();
  }
  if constexpr (Prog::kScoreIsIdentity)
    return acc * scale_log2;
  else if constexpr (kUnscaled)
    return HookParts<Prog>::score_log2_unscaled(args, qp.score, kp.score, acc, scale, b, h, q,
                                                kv);
  else
    return HookParts<Prog>::score_log2(args, qp.score, kp.score, acc, scale, b, h, q, kv);
}

// d score_mod / d score at an in-range element where the mask holds (parts computed with kGrad).
template <class Prog, class Args, class QP, class KP>
__device__ __forceinline__ float element_score_grad(const Args& args, const QP& qp, const KP& kp,
                                                    float score, int b, int h, int q, int kv) {
  return HookParts<Prog>::grad(args, qp.grad, kp.grad, score, b, h, q, kv);
}

// The backward's P = exp2(logit - lse2) of one element, and into p_grad P * score_grad (P where
// score_mod is the identity; score_grad is evaluated only where the mask holds, and where it does
// not read score only where P > 0). Where score_grad reads score, both hooks are evaluated in one
// block at the same scale * acc, so their common subexpressions are computed once (a soft-cap's
// tanh: with score_grad in a block of its own under P > 0, the compiler cannot prove the logit's
// block dominates it and computes the tanh twice). There the logit is the generated
// score_log2_grad's where score_mod and score_grad read score through the same node (score / cap:
// folded once for both), else log2e * score_mod(scale * acc) in the written order (folding
// score_mod alone would give its tanh another argument than score_grad's). Elsewhere the logit
// is element_logit's, folded.
template <class Prog, class Args, bool kMask, bool kBounds, class QP, class KP>
__device__ __forceinline__ float element_probability(const Args& args, const QP& qp, const KP& kp,
                                                     float acc, float scale, float scale_log2,
                                                     int b, int h, int q, int kv, int seq_q,
                                                     int seq_kv, float lse2, float& p_grad) {
  if constexpr (Prog::kScoreIsIdentity || !GradReadsScore<Prog>::value) {
    const float p = fast_exp2(element_logit<Prog, Args, kMask, kBounds>(
                                  args, qp, kp, acc, scale, scale_log2, b, h, q, kv, seq_q, seq_kv) -
                              lse2);
    p_grad = p;
    if constexpr (!Prog::kScoreIsIdentity)
      if (p > 0.f) p_grad *= element_score_grad<Prog>(args, qp, kp, acc * scale, b, h, q, kv);
    return p;
  } else {
    p_grad = 0.f;
    if (kBounds && (q >= seq_q || kv >= seq_kv)) return 0.f;
    if constexpr (kMask)
      if (!HookParts<Prog>::mask(args, qp.mask, kp.mask, b, h, q, kv)) return 0.f;
    float grad, p;
    if constexpr (ScoreGradLog2Declared<Prog>::value) {
      p = fast_exp2(HookParts<Prog>::score_log2_grad(args, qp.score, kp.score, qp.grad, kp.grad,
                                                     acc, scale, b, h, q, kv, grad) -
                    lse2);
    } else {
      const float score = acc * scale;
      grad = element_score_grad<Prog>(args, qp, kp, score, b, h, q, kv);
      p = fast_exp2(HookParts<Prog>::score(args, qp.score, kp.score, score, b, h, q, kv) * kLog2e -
                    lse2);
    }
    p_grad = p;
    if (p > 0.f) p_grad *= grad;
    return p;
  }
}

// Sum / max over the four lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Running max and sum for the 2 * kM rows one thread holds in kM m16 accumulator tiles.
// Row i = 2 * mi + half, half selecting accumulator elements {0,1} or {2,3}.
template <int kM>
struct OnlineSoftmax {
  float m[2 * kM];  // running max (log2 domain), -inf while nothing was seen
  float l[2 * kM];  // this thread's part of the running sum; quad-reduced in finish()

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < 2 * kM; ++i) m[i] = neg_inf(), l[i] = 0.f;
  }

  // Turns logits s into probabilities in place and returns in alpha the factor by which the
  // output accumulator rows must be rescaled. A row that is still all -inf keeps m = -inf and
  // uses 0 as its reference, so no inf - inf appears.
  // s_scale > 0: s holds the logits divided by s_scale (the caller left out that multiply); the
  // maximum commutes with it and the subtraction of the reference becomes one FFMA.
  // kLazy: a row's reference m moves only once some row of the warp has grown past its own by more
  // than kLazyRescaleLog2 (a warp-uniform decision, returned: false means alpha is 1 for every row
  // the warp holds, so the caller may leave O alone). The probabilities are then at most
  // 2^kLazyRescaleLog2 rather than 1; O / l and lse = m + log2(l) are unchanged.
  // kFmaExp2: of every kN n8 tiles of probabilities, how many get fma_exp2 rather than ex2 (one in
  // kN / kFmaExp2, spread through the row so both pipes work side by side).
  static constexpr float kLazyRescaleLog2 = 8.f;
  template <int kN, bool kLazy = false, int kFmaExp2 = 0>
  __device__ __forceinline__ bool update(float (&s)[kM][kN][4], float (&alpha)[2 * kM],
                                         float s_scale = 1.f) {
    static_assert(kFmaExp2 >= 0 && kFmaExp2 <= kN && (kFmaExp2 == 0 || kN % kFmaExp2 == 0));
    constexpr int kFmaEvery = kFmaExp2 > 0 ? kN / kFmaExp2 : 1;
    float mx[2 * kM];
    bool grow = false;
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 2 * mi + half;
        float v = fmaxf(s[mi][0][2 * half], s[mi][0][2 * half + 1]);
#pragma unroll
        for (int n = 1; n < kN; ++n)
          v = fmaxf(v, fmaxf(s[mi][n][2 * half], s[mi][n][2 * half + 1]));
        v = quad_max(v) * s_scale;
        mx[i] = fmaxf(m[i], v);
        if (kLazy) grow |= v > m[i] + kLazyRescaleLog2;
      }
    const bool rescale = !kLazy || __any_sync(0xffffffffu, grow);
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = 2 * mi + half;
        if (rescale) {
          const float ref = mx[i] == neg_inf() ? 0.f : mx[i];
          alpha[i] = fast_exp2(m[i] - ref);
          m[i] = mx[i];
        } else {
          alpha[i] = 1.f;
        }
        const float neg_ref = m[i] == neg_inf() ? 0.f : -m[i];
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
          for (int c = 2 * half; c < 2 * half + 2; ++c) {
            const float x = fmaf(s[mi][n][c], s_scale, neg_ref);
            if (kFmaExp2 > 0 && n % kFmaEvery == kFmaEvery - 1)
              s[mi][n][c] = fma_exp2(x);
            else
              s[mi][n][c] = fast_exp2(x);
            sum += s[mi][n][c];
          }
        l[i] = rescale ? l[i] * alpha[i] + sum : l[i] + sum;
      }
    return rescale;
  }

  // Completes the row sums; returns per row the output scale (0 for an empty row) and the
  // natural-log lse (-inf for an empty row).
  __device__ __forceinline__ void finish(float (&inv)[2 * kM], float (&lse)[2 * kM]) {
#pragma unroll
    for (int i = 0; i < 2 * kM; ++i) {
      float sum = quad_sum(l[i]);
      bool empty = !(sum > 0.f);
      inv[i] = empty ? 0.f : 1.f / sum;
      lse[i] = empty ? neg_inf() : (m[i] + __log2f(sum)) * kLn2;
    }
  }
};

}  // namespace tjk
