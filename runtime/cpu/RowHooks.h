// The program hooks as the CPU executors call them: a row segment at a time (one query row
// against a run of kv positions, one loss row against a run of vocabulary ids), so a native
// backend can loop and vectorise inside one call.
//
// Two implementations share these interfaces: native code JIT-compiled by LLVM
// (runtime/cpu/LlvmHooks.h, when tilejit is built with LLVM) and the IR interpreter
// (compiler/Interpreter.h, CompiledEval, always available). Both evaluate floats exactly as f32
// hardware does (FloatPrecision::F32; transcendentals are computed in fp64 and rounded), so the
// two give the same bits and the executors' results do not depend on the build.
//
// Hooks are bound: they hold the program's captured buffers and params. The buffers' memory
// must outlive the hooks. Calls are const and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "compiler/Lower.h"
#include "runtime/Bindings.h"

namespace tilejit {

// What a program's hooks can skip; the executors consult it before calling.
struct HookTraits {
  bool mask_is_true = false;      // mask_row is all ones
  bool mod_is_identity = false;  // score_mod or logit_mod returns its value
  bool grad_is_one = false;  // score_grad / logit_grad is 1 everywhere
};

class AttentionRowHooks {
 public:
  explicit AttentionRowHooks(HookTraits traits) : traits_(traits) {}
  virtual ~AttentionRowHooks() = default;
  const HookTraits& traits() const { return traits_; }
  virtual std::string_view backend() const = 0;  // "llvm" or "interpreter"

  // Row q of head (b, h) against kv = kv0 .. kv0 + n - 1 (all in range). scores: in, the raw
  // scaled scores; out, score_mod applied, and -inf where the mask is false when check_mask
  // (score_mod is then not evaluated there). check_mask = false is for full tiles.
  virtual void apply_score_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n,
                               float* scores, bool check_mask) const = 0;
  // grad: in, the modded scores (-inf where masked); out, d score_mod / d score at raw[j], or 0
  // where the input was -inf (masked: the derivative is not evaluated there).
  virtual void score_grad_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n,
                              const float* raw, float* grad) const = 0;
  // keep[j] = mask(b, h, q, kv0 + j) ? 1 : 0.
  virtual void mask_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n,
                        uint8_t* keep) const = 0;

 private:
  HookTraits traits_;
};

class LossRowHooks {
 public:
  explicit LossRowHooks(HookTraits traits) : traits_(traits) {}
  virtual ~LossRowHooks() = default;
  const HookTraits& traits() const { return traits_; }
  virtual std::string_view backend() const = 0;

  // logits[j] = logit_mod(logits[j], row, id0 + j) in place.
  virtual void logit_row(int32_t row, int32_t id0, int32_t n, float* logits) const = 0;
  // grad[j] = d logit_mod / d logit at (raw[j], row, id0 + j).
  virtual void logit_grad_row(int32_t row, int32_t id0, int32_t n, const float* raw,
                              float* grad) const = 0;

 private:
  HookTraits traits_;
};

enum class HookBackend : uint8_t {
  Auto,         // LLVM when built with it, else the interpreter (noted once on stderr)
  Interpreter,  // always available
  Llvm,         // a UserError when tilejit was built without LLVM
};

// Binds a lowered program's hooks to host-memory buffers and params. The bindings are checked
// against the program's declarations (UserError naming the program and value).
std::unique_ptr<AttentionRowHooks> make_row_hooks(const LoweredAttention& program,
                                                  const Bindings& bind,
                                                  HookBackend backend = HookBackend::Auto);
std::unique_ptr<LossRowHooks> make_row_hooks(const LoweredLoss& program, const Bindings& bind,
                                             HookBackend backend = HookBackend::Auto);

// Whether this build has the LLVM backend.
bool have_llvm_hooks();

}  // namespace tilejit
