// The q and kv parts of an attention program's hooks.
//
// The compiler splits each generated hook (mask_mod, score_mod, score_grad) into the values that
// depend on (b, h, q) only -- its q part --, those that depend on (b, h, kv) only -- its kv
// part -- and the rest, which reads the parts (compiler/codegen/HookSplit.h). A kernel computes
// the q part once per query position and the kv part once per key position of a tile instead of
// once per element: a document mask reads doc[b, q] twice and doc[b, kv] 2 * kN times per m16 x
// (8 kN) fragment instead of 8 kN times each, a per-head slope or the reciprocal of a soft-cap
// divisor is prepared per row.
//
// Parts are computed for every row and column a thread holds, in range or not, masked or not:
// the IR's operations are total and tj_load reads only elements inside the bound shape, so this
// touches no other memory than the per-element hooks could; a part's value enters the result
// only where its hook runs (in range, mask true for score_mod and score_grad).
//
// Programs whose hooks are written by hand (the standalone harnesses) declare no parts: they get
// empty ones, and their per-element hooks are called.
#pragma once

namespace tjk {

constexpr float kLog2e = 1.4426950408889634f;  // log2-domain logits: x * log2(e)

struct NoHookPart {};

template <class...>
struct HookPartsVoid {
  using type = void;
};
template <bool kFirst, class A, class B>
struct HookPartPick {
  using type = A;
};
template <class A, class B>
struct HookPartPick<false, A, B> {
  using type = B;
};

// name<T>::value: T::member where T declares it (a static constexpr bool the generator emits),
// else `fallback`.
#define TJ_DECLARED_FLAG(name, member, fallback)                      \
  template <class T, class = void>                                    \
  struct name {                                                       \
    static constexpr bool value = fallback;                           \
  };                                                                  \
  template <class T>                                                  \
  struct name<T, typename HookPartsVoid<decltype(T::member)>::type> { \
    static constexpr bool value = T::member;                          \
  }

// Whether a part reads buffers per position (the generator marks it `kGathers`): such parts are
// worth computing once per lane and sharing (compute_held_columns); others, arithmetic or
// per-batch values, are cheaper computed where they are used.
TJ_DECLARED_FLAG(PartGathers, kGathers, false);

// Whether a part is the same at every position (marked `kPositionFree`: a per-head slope, the
// reciprocal of a param): computed once per tile where the kernel shares parts.
TJ_DECLARED_FLAG(PartPositionFree, kPositionFree, false);

// Whether the program declares score_log2 (marked `kScoreLog2`: the generator folded the
// multiplications around score_mod per row, compiler/codegen/ScoreFold.h).
TJ_DECLARED_FLAG(ScoreLog2Declared, kScoreLog2, false);

// Whether score_grad reads score (marked `kGradReadsScore` by the generator; assumed where not
// marked). A backward pass evaluates score_grad at scale * acc next to score_mod's logit; where
// score_grad reads score the two share their common subexpressions (a soft-cap's tanh) only if
// the logit is computed in the written order, elsewhere the folded logit is cheaper.
TJ_DECLARED_FLAG(GradReadsScore, kGradReadsScore, true);

// Whether score_mod evaluates, per element, an operation on the pipe ex2 runs on (tanh, exp, log,
// rsqrt, sqrt, a division, of something that reads score: marked `kScoreUsesXu`). Such a forward
// element pass leans on that pipe twice per element, so its softmax moves a share of its
// exponentials to the FMA pipe (fma_exp2).
TJ_DECLARED_FLAG(ScoreUsesXu, kScoreUsesXu, false);

// Whether mask_mod reads a captured buffer, itself or through its parts (marked
// `kMaskReadsBuffers`; assumed where not marked). A mask that reads none is evaluated without
// branches, at out-of-range positions too, its result discarded there (element_logit).
TJ_DECLARED_FLAG(MaskReadsBuffers, kMaskReadsBuffers, true);

// Whether the program declares score_log2_grad (marked `kScoreGradLog2`: score_mod's logit and
// score_grad at one point, their shared nodes computed once, compiler/codegen/ScoreLog2Writer.h).
TJ_DECLARED_FLAG(ScoreGradLog2Declared, kScoreGradLog2, false);

// Whether the program declares score_log2 as score_log2_unscaled * score_log2_factor (marked
// `kScoreLog2Factored`: the factor is free of score and of the positions).
TJ_DECLARED_FLAG(ScoreLog2Factored, kScoreLog2Factored, false);

// Hooks without parts: Prog::mask_mod(args, b, h, q, kv) and so on, per element.
template <class Prog, class = void>
struct HookParts {
  using MaskQ = NoHookPart;
  using MaskKv = NoHookPart;
  using ScoreQ = NoHookPart;
  using ScoreKv = NoHookPart;
  using GradQ = NoHookPart;
  using GradKv = NoHookPart;
  template <class Args>
  __device__ __forceinline__ static NoHookPart mask_q(const Args&, int, int, int) { return {}; }
  template <class Args>
  __device__ __forceinline__ static NoHookPart mask_kv(const Args&, int, int, int) { return {}; }
  template <class Args>
  __device__ __forceinline__ static NoHookPart score_q(const Args&, int, int, int) { return {}; }
  template <class Args>
  __device__ __forceinline__ static NoHookPart score_kv(const Args&, int, int, int) { return {}; }
  template <class Args>
  __device__ __forceinline__ static NoHookPart grad_q(const Args&, int, int, int) { return {}; }
  template <class Args>
  __device__ __forceinline__ static NoHookPart grad_kv(const Args&, int, int, int) { return {}; }
  template <class Args>
  __device__ __forceinline__ static bool mask(const Args& a, NoHookPart, NoHookPart, int b, int h,
                                              int q, int kv) {
    return Prog::mask_mod(a, b, h, q, kv);
  }
  template <class Args>
  __device__ __forceinline__ static float score(const Args& a, NoHookPart, NoHookPart, float s,
                                                int b, int h, int q, int kv) {
    return Prog::score_mod(a, s, b, h, q, kv);
  }
  template <class Args>
  __device__ __forceinline__ static float grad(const Args& a, NoHookPart, NoHookPart, float s,
                                               int b, int h, int q, int kv) {
    return Prog::score_grad(a, s, b, h, q, kv);
  }
  template <class Args>
  __device__ __forceinline__ static float score_log2(const Args& a, NoHookPart, NoHookPart,
                                                     float acc, float scale, int b, int h, int q,
                                                     int kv) {
    return Prog::score_mod(a, acc * scale, b, h, q, kv) * kLog2e;
  }
};

// Generated hooks: Prog::MaskQ, Prog::mask_q(args, b, h, q), Prog::mask_mod(args, q part,
// kv part, b, h, q, kv), and the same for score_mod (Score*) and score_grad (Grad*).
template <class Prog>
struct HookParts<Prog, typename HookPartsVoid<typename Prog::MaskQ>::type> {
  using MaskQ = typename Prog::MaskQ;
  using MaskKv = typename Prog::MaskKv;
  using ScoreQ = typename Prog::ScoreQ;
  using ScoreKv = typename Prog::ScoreKv;
  using GradQ = typename Prog::GradQ;
  using GradKv = typename Prog::GradKv;
  template <class Args>
  __device__ __forceinline__ static MaskQ mask_q(const Args& a, int b, int h, int q) {
    return Prog::mask_q(a, b, h, q);
  }
  template <class Args>
  __device__ __forceinline__ static MaskKv mask_kv(const Args& a, int b, int h, int kv) {
    return Prog::mask_kv(a, b, h, kv);
  }
  template <class Args>
  __device__ __forceinline__ static ScoreQ score_q(const Args& a, int b, int h, int q) {
    return Prog::score_q(a, b, h, q);
  }
  template <class Args>
  __device__ __forceinline__ static ScoreKv score_kv(const Args& a, int b, int h, int kv) {
    return Prog::score_kv(a, b, h, kv);
  }
  template <class Args>
  __device__ __forceinline__ static GradQ grad_q(const Args& a, int b, int h, int q) {
    return Prog::grad_q(a, b, h, q);
  }
  template <class Args>
  __device__ __forceinline__ static GradKv grad_kv(const Args& a, int b, int h, int kv) {
    return Prog::grad_kv(a, b, h, kv);
  }
  template <class Args>
  __device__ __forceinline__ static bool mask(const Args& a, const MaskQ& qp, const MaskKv& kp,
                                              int b, int h, int q, int kv) {
    return Prog::mask_mod(a, qp, kp, b, h, q, kv);
  }
  template <class Args>
  __device__ __forceinline__ static float score(const Args& a, const ScoreQ& qp,
                                                const ScoreKv& kp, float s, int b, int h, int q,
                                                int kv) {
    return Prog::score_mod(a, qp, kp, s, b, h, q, kv);
  }
  template <class Args>
  __device__ __forceinline__ static float grad(const Args& a, const GradQ& qp, const GradKv& kp,
                                               float s, int b, int h, int q, int kv) {
    return Prog::score_grad(a, qp, kp, s, b, h, q, kv);
  }
  // log2e * score_mod(scale * acc) and, into grad, score_grad(scale * acc), where the program
  // declares kScoreGradLog2.
  template <class Args>
  __device__ __forceinline__ static float score_log2_grad(const Args& a, const ScoreQ& qp,
                                                          const ScoreKv& kp, const GradQ& gq,
                                                          const GradKv& gk, float acc, float scale,
                                                          int b, int h, int q, int kv,
                                                          float& grad) {
    return Prog::score_log2_grad(a, qp, kp, gq, gk, acc, scale, b, h, q, kv, grad);
  }
  // log2e * score_mod(scale * acc): the generated fold where there is one.
  template <class Args>
  __device__ __forceinline__ static float score_log2(const Args& a, const ScoreQ& qp,
                                                     const ScoreKv& kp, float acc, float scale,
                                                     int b, int h, int q, int kv) {
    if constexpr (ScoreLog2Declared<Prog>::value)
      return Prog::score_log2(a, qp, kp, acc, scale, b, h, q, kv);
    else
      return Prog::score_mod(a, qp, kp, acc * scale, b, h, q, kv) * kLog2e;
  }
  // score_log2's two factors where the program declares kScoreLog2Factored.
  template <class Args>
  __device__ __forceinline__ static float score_log2_unscaled(const Args& a, const ScoreQ& qp,
                                                              const ScoreKv& kp, float acc,
                                                              float scale, int b, int h, int q,
                                                              int kv) {
    return Prog::score_log2_unscaled(a, qp, kp, acc, scale, b, h, q, kv);
  }
  template <class Args>
  __device__ __forceinline__ static float score_log2_factor(const Args& a, const ScoreQ& qp,
                                                            float scale, int b, int h) {
    return Prog::score_log2_factor(a, qp, scale, b, h);
  }
};

// The parts one element pass needs at one position (a q when kIsKv is false, a kv otherwise):
// the mask's when kMask, score_mod's unless it is the identity, score_grad's when kGrad too.
// Parts a pass does not need are neither computed nor read.
template <class Prog, bool kMask, bool kGrad, bool kIsKv>
struct PositionParts {
  using H = HookParts<Prog>;
  static constexpr bool kScore = !Prog::kScoreIsIdentity;
  static constexpr bool kGradient = kGrad && !Prog::kScoreIsIdentity;
  typename HookPartPick<kIsKv, typename H::MaskKv, typename H::MaskQ>::type mask;
  typename HookPartPick<kIsKv, typename H::ScoreKv, typename H::ScoreQ>::type score;
  typename HookPartPick<kIsKv, typename H::GradKv, typename H::GradQ>::type grad;

  // Which members compute_mask / compute_values compute: all, those that read buffers per
  // position (PartGathers), those that are the same at every position (PartPositionFree), or
  // the others.
  static constexpr int kAll = 0, kGathering = 1, kPositionFree = 2, kLocal = 3;
  template <class T, int kWhich>
  __device__ static constexpr bool wanted() {
    constexpr int kind =
        PartGathers<T>::value ? kGathering : PartPositionFree<T>::value ? kPositionFree : kLocal;
    return kWhich == kAll || kWhich == kind;
  }

  template <class Args>
  __device__ __forceinline__ void compute(const Args& a, int b, int h, int pos) {
    compute_mask(a, b, h, pos);
    compute_values(a, b, h, pos);
  }
  // The mask's part alone, for a caller that knows only at run time whether a tile needs it.
  template <int kWhich = kAll, class Args>
  __device__ __forceinline__ void compute_mask(const Args& a, int b, int h, int pos) {
    if constexpr (kMask && wanted<decltype(mask), kWhich>()) {
      if constexpr (kIsKv)
        mask = H::mask_kv(a, b, h, pos);
      else
        mask = H::mask_q(a, b, h, pos);
    }
  }
  // score_mod's and score_grad's parts.
  template <int kWhich = kAll, class Args>
  __device__ __forceinline__ void compute_values(const Args& a, int b, int h, int pos) {
    if constexpr (kIsKv) {
      if constexpr (kScore && wanted<decltype(score), kWhich>())
        score = H::score_kv(a, b, h, pos);
      if constexpr (kGradient && wanted<decltype(grad), kWhich>()) grad = H::grad_kv(a, b, h, pos);
    } else {
      if constexpr (kScore && wanted<decltype(score), kWhich>()) score = H::score_q(a, b, h, pos);
      if constexpr (kGradient && wanted<decltype(grad), kWhich>()) grad = H::grad_q(a, b, h, pos);
    }
  }
};

// Parts at positions first, first + stride, ... (the rows or the columns a thread holds).
template <class Parts, int kN, class Args>
__device__ __forceinline__ void compute_parts(Parts (&parts)[kN], const Args& args, int b, int h,
                                              int first, int stride) {
#pragma unroll
  for (int i = 0; i < kN; ++i) parts[i].compute(args, b, h, first + i * stride);
}

// A part's value as lane `src` of the warp holds it (its 32-bit words shuffled; nothing for an
// empty part). All 32 lanes take part.
template <class T>
__device__ __forceinline__ T shuffle_part(const T& v, int src) {
  if constexpr (__is_empty(T)) {
    return v;
  } else {
    constexpr int kWords = (sizeof(T) + 3) / 4;
    unsigned w[kWords] = {};
    memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = __shfl_sync(0xffffffffu, w[i], src);
    T out;
    memcpy(&out, w, sizeof(T));
    return out;
  }
}

// A member of the parts at a position from what compute_held_columns left: as lane `src` holds
// it when it gathers, this lane's own when it is the same everywhere.
template <class T>
__device__ __forceinline__ void part_from_lane(T& out, const T& held, int src) {
  if constexpr (PartGathers<T>::value)
    out = shuffle_part(held, src);
  else if constexpr (PartPositionFree<T>::value)
    out = held;
}

// The parts at position `pos`: those that gather (PartGathers) as lane `src` holds them in
// `held` (shuffle_part), those the same everywhere from this lane's held[0] (`first`), the
// others computed here; the mask's only when kWithMask.
template <bool kWithMask, class Parts, class Args>
__device__ __forceinline__ Parts parts_from_lane(const Parts& held, const Parts& first, int src,
                                                 const Args& args, int b, int h, int pos) {
  Parts out;
  if constexpr (kWithMask) {
    if constexpr (PartPositionFree<decltype(out.mask)>::value)
      out.mask = first.mask;
    else
      part_from_lane(out.mask, held.mask, src);
  }
  if constexpr (PartPositionFree<decltype(out.score)>::value)
    out.score = first.score;
  else
    part_from_lane(out.score, held.score, src);
  if constexpr (PartPositionFree<decltype(out.grad)>::value)
    out.grad = first.grad;
  else
    part_from_lane(out.grad, held.grad, src);
  if constexpr (kWithMask) out.template compute_mask<Parts::kLocal>(args, b, h, pos);
  out.template compute_values<Parts::kLocal>(args, b, h, pos);
  return out;
}

// The parts of the two adjacent rows or columns an accumulator fragment gives a thread.
template <class Parts>
struct PartsPair {
  Parts at[2];
};

// The column parts of an accumulator tile of 32 kHeld columns from `first` (logits_from_parts'
// col_parts). Parts that read buffers per column (a document id) are computed one per lane
// before the tile's product lands -- lane l computes column first + l + 32 i into held[i]
// (compute_held_columns), so the loads overlap the product and number one per lane instead of
// one per column a thread holds -- and shuffled to the element pass: column group n (columns
// 8 n + 2 t + j, t = lane % 4) is in held[n / 4] of lane 8 (n % 4) + 2 t + j. Parts that are the
// same at every column are computed once, into held[0]; the other parts per column there, as
// apply_logits does. The mask's parts are computed and read
// only when asked (a full tile needs none).
template <class Parts, int kHeld, class Args>
__device__ __forceinline__ void compute_held_columns(Parts (&held)[kHeld], const Args& args,
                                                     int b, int h, int first, bool with_mask) {
  const int col = first + (threadIdx.x & 31);
#pragma unroll
  for (int i = 0; i < kHeld; ++i)
    held[i].template compute_values<Parts::kGathering>(args, b, h, col + 32 * i);
  held[0].template compute_values<Parts::kPositionFree>(args, b, h, col);
  if (with_mask) {
#pragma unroll
    for (int i = 0; i < kHeld; ++i)
      held[i].template compute_mask<Parts::kGathering>(args, b, h, col + 32 * i);
    held[0].template compute_mask<Parts::kPositionFree>(args, b, h, col);
  }
}

template <class Parts, bool kWithMask, int kHeld, class Args>
struct WarpHeldColumns {
  const Parts (&held)[kHeld];
  const Args& args;
  int b, h, first;
  __device__ __forceinline__ PartsPair<Parts> operator()(int n) const {
    const int t = threadIdx.x & 3;
    PartsPair<Parts> pp;
#pragma unroll
    for (int j = 0; j < 2; ++j)
      pp.at[j] = parts_from_lane<kWithMask>(held[n / 4], held[0], 8 * (n % 4) + 2 * t + j, args,
                                            b, h, first + 8 * n + 2 * t + j);
    return pp;
  }
};

template <class Prog, bool kMask, bool kGrad>
using QParts = PositionParts<Prog, kMask, kGrad, false>;
template <class Prog, bool kMask, bool kGrad>
using KvParts = PositionParts<Prog, kMask, kGrad, true>;

}  // namespace tjk
