#include "runtime/cpu/LlvmHooks.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/OptimizationLevel.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>

#include "compiler/Error.h"
#include "compiler/codegen/LlvmCodegen.h"

namespace tilejit {

namespace {

using ScoreRowFn = void (*)(const uint8_t*, int32_t, int32_t, int32_t, int32_t, int32_t, float*, int32_t);
using ScoreGradRowFn = void (*)(const uint8_t*, int32_t, int32_t, int32_t, int32_t, int32_t,
                                const float*, float*);
using MaskRowFn = void (*)(const uint8_t*, int32_t, int32_t, int32_t, int32_t, int32_t, uint8_t*);
using LogitRowFn = void (*)(const uint8_t*, int32_t, int32_t, int32_t, float*);
using LogitGradRowFn = void (*)(const uint8_t*, int32_t, int32_t, int32_t, const float*, float*);

struct AttentionFns {
  ScoreRowFn score = nullptr;
  ScoreGradRowFn grad = nullptr;
  MaskRowFn mask = nullptr;
};
struct LossFns {
  LogitRowFn logit = nullptr;
  LogitGradRowFn grad = nullptr;
};

// The value of an llvm::Expected, or an InternalError with LLVM's message.
template <typename T>
T take(llvm::Expected<T> value, std::string_view what) {
  if (!value) internal_error("LLVM {}: {}", what, llvm::toString(value.takeError()));
  return std::move(*value);
}
void check(llvm::Error err, std::string_view what) {
  if (err) internal_error("LLVM {}: {}", what, llvm::toString(std::move(err)));
}

// One LLJIT for the process; compiled programs stay loaded for its lifetime.
class HookJit {
 public:
  static HookJit& get() {
    static HookJit jit;
    return jit;
  }

  AttentionFns attention(const LoweredAttention& p) {
    std::lock_guard lock(mutex_);
    auto it = attention_.find(p.hash);
    if (it != attention_.end()) return it->second;
    std::string prefix = next_prefix(p.hash);
    add([&](llvm::LLVMContext& c) { return emit_attention_row_hooks(c, p, prefix); });
    AttentionFns fns{lookup<ScoreRowFn>(prefix, "score_row"),
                     lookup<ScoreGradRowFn>(prefix, "score_grad_row"),
                     lookup<MaskRowFn>(prefix, "mask_row")};
    attention_.emplace(p.hash, fns);
    return fns;
  }

  LossFns loss(const LoweredLoss& p) {
    std::lock_guard lock(mutex_);
    auto it = loss_.find(p.hash);
    if (it != loss_.end()) return it->second;
    std::string prefix = next_prefix(p.hash);
    add([&](llvm::LLVMContext& c) { return emit_loss_row_hooks(c, p, prefix); });
    LossFns fns{lookup<LogitRowFn>(prefix, "logit_row"),
                lookup<LogitGradRowFn>(prefix, "logit_grad_row")};
    loss_.emplace(p.hash, fns);
    return fns;
  }

  void clear() {
    std::lock_guard lock(mutex_);
    attention_.clear();
    loss_.clear();
  }

 private:
  HookJit() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = take(llvm::orc::JITTargetMachineBuilder::detectHost(), "host detection");
    jtmb.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
    cpu_ = jtmb.getCPU();
    features_ = jtmb.getFeatures().getString();
    machine_ = take(jtmb.createTargetMachine(), "target machine");
    jit_ = take(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(), "LLJIT");
    // Generated code calls the C library (exp, tanh, ...): resolve from this process.
    jit_->getMainJITDylib().addGenerator(
        take(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                 jit_->getDataLayout().getGlobalPrefix()),
             "process symbols"));
  }

  // Symbols are unique per compile, so a program compiled again after clear() never clashes.
  std::string next_prefix(const std::string& hash) {
    return fmt::format("tj_{}_{}", hash.substr(0, 16), ++compiles_);
  }

  template <typename Emit>
  void add(Emit&& emit) {
    auto context = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> m = take(emit(*context), "code generation");
    m->setDataLayout(jit_->getDataLayout());
    m->setTargetTriple(jit_->getTargetTriple().str());
    for (llvm::Function& f : *m) {
      if (f.isDeclaration()) continue;
      f.addFnAttr("target-cpu", cpu_);
      f.addFnAttr("target-features", features_);
    }
    optimize(*m);
    check(jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(context))),
          "adding a module");
  }

  void optimize(llvm::Module& m) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = true;
    tuning.SLPVectorization = true;
    llvm::PassBuilder pb(machine_.get(), tuning);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
  }

  template <typename Fn>
  Fn lookup(const std::string& prefix, std::string_view hook) {
    auto symbol = take(jit_->lookup(llvm_hook_symbol(prefix, hook)), "symbol lookup");
    return reinterpret_cast<Fn>(static_cast<uintptr_t>(symbol.getAddress()));
  }

  std::mutex mutex_;
  std::string cpu_, features_;
  std::unique_ptr<llvm::TargetMachine> machine_;
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::unordered_map<std::string, AttentionFns> attention_;
  std::unordered_map<std::string, LossFns> loss_;
  uint64_t compiles_ = 0;
};

// The TjArgs block with host pointers. Generated loads are branch-free (they read element 0
// when out of range), so an empty buffer points at a zero sentinel instead of its own memory.
std::vector<uint64_t> host_args(const ArgLayout& layout, const Bindings& bind) {
  alignas(16) static const uint64_t zero_sentinel[2] = {0, 0};
  std::vector<unsigned char> bytes = pack_args(layout, bind);
  for (const ArgField& f : layout.fields) {
    if (f.kind != ArgField::Kind::Buffer) continue;
    const TensorView* view = bind.find_buffer(f.name);
    if (view->numel() == 0 || view->data == nullptr) {
      const void* p = zero_sentinel;
      std::memcpy(bytes.data() + f.offset, &p, sizeof p);
    }
  }
  std::vector<uint64_t> words((bytes.size() + 7) / 8, 0);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  return words;
}

class JitAttentionHooks final : public AttentionRowHooks {
 public:
  JitAttentionHooks(const LoweredAttention& p, const Bindings& bind)
      : AttentionRowHooks({p.mask_is_true, p.score_is_identity, p.score_grad_is_one}),
        fns_(HookJit::get().attention(p)),
        args_(host_args(arg_layout(p.program), bind)) {}

  std::string_view backend() const override { return "llvm"; }
  void apply_score_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n, float* s,
                       bool check_mask) const override {
    fns_.score(bytes(), b, h, q, kv0, n, s, check_mask ? 1 : 0);
  }
  void score_grad_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n, const float* raw,
                      float* grad) const override {
    fns_.grad(bytes(), b, h, q, kv0, n, raw, grad);
  }
  void mask_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n,
                uint8_t* keep) const override {
    fns_.mask(bytes(), b, h, q, kv0, n, keep);
  }

 private:
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(args_.data()); }
  AttentionFns fns_;
  std::vector<uint64_t> args_;
};

class JitLossHooks final : public LossRowHooks {
 public:
  JitLossHooks(const LoweredLoss& p, const Bindings& bind)
      : LossRowHooks({true, p.logit_is_identity, p.logit_grad_is_one}),
        fns_(HookJit::get().loss(p)),
        args_(host_args(arg_layout(p.program), bind)) {}

  std::string_view backend() const override { return "llvm"; }
  void logit_row(int32_t row, int32_t id0, int32_t n, float* x) const override {
    fns_.logit(bytes(), row, id0, n, x);
  }
  void logit_grad_row(int32_t row, int32_t id0, int32_t n, const float* raw,
                      float* grad) const override {
    fns_.grad(bytes(), row, id0, n, raw, grad);
  }

 private:
  const uint8_t* bytes() const { return reinterpret_cast<const uint8_t*>(args_.data()); }
  LossFns fns_;
  std::vector<uint64_t> args_;
};

}  // namespace

std::unique_ptr<AttentionRowHooks> make_llvm_row_hooks(const LoweredAttention& p,
                                                       const Bindings& bind) {
  return std::make_unique<JitAttentionHooks>(p, bind);
}

std::unique_ptr<LossRowHooks> make_llvm_row_hooks(const LoweredLoss& p, const Bindings& bind) {
  return std::make_unique<JitLossHooks>(p, bind);
}

void clear_llvm_hook_cache() { HookJit::get().clear(); }

}  // namespace tilejit
