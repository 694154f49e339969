#include "runtime/cpu/RowHooks.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "compiler/Error.h"
#include "compiler/Interpreter.h"
#ifdef TILEJIT_HAVE_LLVM
#include "runtime/cpu/LlvmHooks.h"
#endif

namespace tilejit {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The bound values as the interpreter reads them, in f32 precision (what f32 hardware computes).
EvalContext eval_bindings(const Bindings& bind) {
  EvalContext ctx;
  ctx.precision = FloatPrecision::F32;
  for (const auto& [name, view] : bind.buffers()) {
    BufferView b;
    b.data = view.data;
    b.elem = view.dtype == DType::I32    ? ElemType::I32
             : view.dtype == DType::F32  ? ElemType::F32
             : view.dtype == DType::BF16 ? ElemType::BF16
                                         : ElemType::F16;
    b.sizes = view.shape;
    b.strides = view.strides;
    ctx.buffers.emplace(name, std::move(b));
  }
  for (const auto& [name, value] : bind.params()) {
    if (const float* f = std::get_if<float>(&value))
      ctx.params.emplace(name, static_cast<double>(*f));
    else
      ctx.params.emplace(name, static_cast<int64_t>(std::get<int32_t>(value)));
  }
  return ctx;
}

class InterpretedAttentionHooks final : public AttentionRowHooks {
 public:
  InterpretedAttentionHooks(const LoweredAttention& p, const EvalContext& ctx)
      : AttentionRowHooks({p.mask_is_true, p.score_is_identity, p.score_grad_is_one}),
        mask_(p.program.mask, ctx),
        score_(p.program.score, ctx),
        grad_(p.score_grad, ctx) {}

  std::string_view backend() const override { return "interpreter"; }

  void apply_score_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n, float* s,
                       bool check_mask) const override {
    for (int32_t j = 0; j < n; ++j) {
      int32_t kv = kv0 + j;
      if (check_mask && !mask_.eval_mask(b, h, q, kv))
        s[j] = kNegInf;
      else
        s[j] = static_cast<float>(score_.eval_score(s[j], b, h, q, kv));
    }
  }

  void score_grad_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n, const float* raw,
                      float* grad) const override {
    for (int32_t j = 0; j < n; ++j)
      grad[j] = grad[j] == kNegInf ? 0.0f
                                   : static_cast<float>(grad_.eval_score(raw[j], b, h, q, kv0 + j));
  }

  void mask_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n,
                uint8_t* keep) const override {
    for (int32_t j = 0; j < n; ++j) keep[j] = mask_.eval_mask(b, h, q, kv0 + j) ? 1 : 0;
  }

 private:
  CompiledEval mask_, score_, grad_;
};

class InterpretedLossHooks final : public LossRowHooks {
 public:
  InterpretedLossHooks(const LoweredLoss& p, const EvalContext& ctx)
      : LossRowHooks({true, p.logit_is_identity, p.logit_grad_is_one}),
        logit_(p.program.logit, ctx),
        grad_(p.logit_grad, ctx) {}

  std::string_view backend() const override { return "interpreter"; }

  void logit_row(int32_t row, int32_t id0, int32_t n, float* x) const override {
    for (int32_t j = 0; j < n; ++j) x[j] = static_cast<float>(logit_.eval_logit(x[j], row, id0 + j));
  }
  void logit_grad_row(int32_t row, int32_t id0, int32_t n, const float* raw,
                      float* grad) const override {
    for (int32_t j = 0; j < n; ++j)
      grad[j] = static_cast<float>(grad_.eval_logit(raw[j], row, id0 + j));
  }

 private:
  CompiledEval logit_, grad_;
};

bool use_llvm(HookBackend backend) {
  if (backend == HookBackend::Interpreter) return false;
  if (have_llvm_hooks()) return true;
  TILEJIT_USER_CHECK(backend != HookBackend::Llvm,
                     "the LLVM CPU backend was requested but tilejit was built without LLVM "
                     "(TILEJIT_WITH_LLVM=OFF)");
  static std::once_flag noted;
  std::call_once(noted, [] {
    fmt::print(stderr,
               "tilejit: built without LLVM; CPU program hooks run in the IR interpreter "
               "(slower, same results)\n");
  });
  return false;
}

}  // namespace

bool have_llvm_hooks() {
#ifdef TILEJIT_HAVE_LLVM
  return true;
#else
  return false;
#endif
}

std::unique_ptr<AttentionRowHooks> make_row_hooks(const LoweredAttention& p, const Bindings& bind,
                                                  HookBackend backend) {
  check_bindings(p.program, bind, TensorView::Where::Host);
#ifdef TILEJIT_HAVE_LLVM
  if (use_llvm(backend)) return make_llvm_row_hooks(p, bind);
#else
  use_llvm(backend);
#endif
  return std::make_unique<InterpretedAttentionHooks>(p, eval_bindings(bind));
}

std::unique_ptr<LossRowHooks> make_row_hooks(const LoweredLoss& p, const Bindings& bind,
                                             HookBackend backend) {
  check_bindings(p.program.name, p.program.buffers, p.program.params, bind,
                 TensorView::Where::Host);
#ifdef TILEJIT_HAVE_LLVM
  if (use_llvm(backend)) return make_llvm_row_hooks(p, bind);
#else
  use_llvm(backend);
#endif
  return std::make_unique<InterpretedLossHooks>(p, eval_bindings(bind));
}

}  // namespace tilejit
