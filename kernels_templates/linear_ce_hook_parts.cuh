// The constant and row parts of a loss program's hooks, as the linear cross-entropy kernels use
// them.
//
// The compiler splits each generated loss hook (logit_mod, logit_grad) into the values that
// depend on neither logit, row nor id -- its constant part: what is computed from params and
// constants alone --, those that depend on the row alone -- its row part -- and the rest, per
// logit, which reads them (compiler/codegen/HookSplit.h). A kernel computes the constant part
// once per thread, before its tile loop, and the row part once per row it holds in a tile,
// instead of once per logit: Gemma 2's soft-cap `cap * tanh(logit / cap)` divides by nothing
// per logit (two multiplies by the reciprocal of cap, prepared once: tj_recip, common.cuh).
// Row parts are computed per tile rather than kept across the forward's tile loop, whose
// accumulators leave no registers to spare.
//
// Row parts are computed for every row a thread holds, kept or not (a row past the kept ones is
// row 0): the IR's operations are total and tj_load reads only elements inside the bound shape,
// so this touches no other memory than the per-logit hooks could; a part's value enters a result
// only where its hook runs. Nothing is computed for an identity logit_mod, whose hooks the
// kernels never call.
//
// Programs whose hooks are written by hand (tests/gpu/linear_ce_harness.cu) declare no parts:
// they get empty ones, and their per-logit hooks are called.
#pragma once

#include "hook_parts.cuh"

namespace tilejit_ce {

using NoLogitPart = tjk::NoHookPart;  // the empty part, as the attention hooks have it

// Hooks without parts: Prog::logit_mod(args, logit, row, id) and Prog::logit_grad, per logit.
template <class Prog, class = void>
struct LogitHookParts {
  using LogitConst = NoLogitPart;
  using LogitRow = NoLogitPart;
  using GradConst = NoLogitPart;
  using GradRow = NoLogitPart;
  template <class Args>
  __device__ __forceinline__ static NoLogitPart logit_const(const Args&) {
    return {};
  }
  template <class Args>
  __device__ __forceinline__ static NoLogitPart logit_row(const Args&, int) {
    return {};
  }
  template <class Args>
  __device__ __forceinline__ static NoLogitPart grad_const(const Args&) {
    return {};
  }
  template <class Args>
  __device__ __forceinline__ static NoLogitPart grad_row(const Args&, int) {
    return {};
  }
  template <class Args>
  __device__ __forceinline__ static float mod(const Args& a, NoLogitPart, NoLogitPart, float x,
                                              int row, int id) {
    return Prog::logit_mod(a, x, row, id);
  }
  template <class Args>
  __device__ __forceinline__ static float grad(const Args& a, NoLogitPart, NoLogitPart, float x,
                                               int row, int id) {
    return Prog::logit_grad(a, x, row, id);
  }
};

// Generated hooks: Prog::LogitConst, Prog::logit_const(args), Prog::LogitRow,
// Prog::logit_row(args, row), Prog::logit_mod(args, constant part, row part, logit, row, id),
// and the same for logit_grad (Grad*).
template <class Prog>
struct LogitHookParts<Prog, typename tjk::HookPartsVoid<typename Prog::LogitConst>::type> {
  using LogitConst = typename Prog::LogitConst;
  using LogitRow = typename Prog::LogitRow;
  using GradConst = typename Prog::GradConst;
  using GradRow = typename Prog::GradRow;
  template <class Args>
  __device__ __forceinline__ static LogitConst logit_const(const Args& a) {
    return Prog::logit_const(a);
  }
  template <class Args>
  __device__ __forceinline__ static LogitRow logit_row(const Args& a, int row) {
    return Prog::logit_row(a, row);
  }
  template <class Args>
  __device__ __forceinline__ static GradConst grad_const(const Args& a) {
    return Prog::grad_const(a);
  }
  template <class Args>
  __device__ __forceinline__ static GradRow grad_row(const Args& a, int row) {
    return Prog::grad_row(a, row);
  }
  template <class Args>
  __device__ __forceinline__ static float mod(const Args& a, const LogitConst& cp,
                                              const LogitRow& rp, float x, int row, int id) {
    return Prog::logit_mod(a, cp, rp, x, row, id);
  }
  template <class Args>
  __device__ __forceinline__ static float grad(const Args& a, const GradConst& cp,
                                               const GradRow& rp, float x, int row, int id) {
    return Prog::logit_grad(a, cp, rp, x, row, id);
  }
};

// A kernel's loss hooks: the constant parts of logit_mod and (kGrad) logit_grad, computed once
// when constructed; at_row(row) adds a row's parts and evaluates the hooks at that row.
template <class Prog, class Args, bool kGrad>
struct LogitHooks {
  using H = LogitHookParts<Prog>;

  // Default-constructible (kernels keep an array of rows); use only what at_row returned.
  struct Row {
    const LogitHooks* hooks = nullptr;
    int row = 0;
    typename H::LogitRow mod_part;
    typename H::GradRow grad_part;

    // logit_mod(x, row, id): x itself for an identity logit_mod.
    __device__ __forceinline__ float mod(float x, int id) const {
      if constexpr (Prog::kLogitIsIdentity)
        return x;
      else
        return H::mod(hooks->args, hooks->mod_const, mod_part, x, row, id);
    }
    // d logit_mod / d logit at (x, row, id): 1 for an identity logit_mod.
    __device__ __forceinline__ float grad(float x, int id) const {
      static_assert(kGrad, "LogitHooks<..., kGrad = false> computes no logit_grad parts");
      if constexpr (Prog::kLogitIsIdentity)
        return 1.f;
      else
        return H::grad(hooks->args, hooks->grad_const, grad_part, x, row, id);
    }
  };

  const Args& args;
  typename H::LogitConst mod_const;
  typename H::GradConst grad_const;

  __device__ __forceinline__ explicit LogitHooks(const Args& a) : args(a) {
    if constexpr (!Prog::kLogitIsIdentity) {
      mod_const = H::logit_const(a);
      if constexpr (kGrad) grad_const = H::grad_const(a);
    }
  }

  __device__ __forceinline__ Row at_row(int row) const {
    Row r;
    r.hooks = this;
    r.row = row;
    if constexpr (!Prog::kLogitIsIdentity) {
      r.mod_part = H::logit_row(args, row);
      if constexpr (kGrad) r.grad_part = H::grad_row(args, row);
    }
    return r;
  }
};

}  // namespace tilejit_ce
