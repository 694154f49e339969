// A loss program's GPU kernels: the modules generated for it (one per LossModule), compiled
// through the kernel cache on first use and memoised per program, element type and arch
// (linear_ce::PreparedLoss), and the choice of tile loop.
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "runtime/DenseMask.h"
#include "runtime/KernelCache.h"
#include "runtime/LinearCe.h"
#include "runtime/LinearCeParams.h"
#include "runtime/LinearCeState.h"
#include "runtime/Module.h"

namespace tilejit {

using namespace linear_ce;

ElemType linear_ce::elem_of(DType dtype) {
  TILEJIT_USER_CHECK(dtype == DType::BF16 || dtype == DType::F16,
                     "linear cross-entropy kernels take bf16 or f16 operands, not {}",
                     dtype_name(dtype));
  return dtype == DType::F16 ? ElemType::F16 : ElemType::BF16;
}

namespace {

LinearCeModule make_module(const LoweredLoss& l, LossModule m, ElemType elem, CeTileLoop loop) {
  LinearCeModule out;
  out.source = generate_loss_module(l.program, l.logit_grad, m, elem, loop);
  const bool shared = !loss_module_uses_program(m);
  out.spec = kernel_spec(out.source.cuda, shared ? "linear_ce" : l.program.name);
  out.spec.entry_points.clear();
  for (const auto& [kernel, entry] : out.source.entries) out.spec.entry_points.push_back(entry);
  out.spec.variant = out.source.variant;
  return out;
}

}  // namespace

CUfunction linear_ce::PreparedLoss::function(LossModule m, std::string_view kernel,
                                             int dynamic_smem) {
  std::unique_lock<std::mutex> lock(mu);
  auto it = modules.find(m);
  if (it == modules.end()) {
    lock.unlock();  // compiling takes seconds: other modules may proceed meanwhile
    LinearCeModule mod = make_module(lowered, m, elem, linear_ce_tile_loop());
    auto compiled = KernelCache::global().get(mod.spec, arch);
    lock.lock();
    it = modules.emplace(m, std::make_pair(mod.source.entries, compiled)).first;
  }
  auto entry = it->second.first.find(kernel);
  TILEJIT_INTERNAL_CHECK(entry != it->second.first.end(), "no loss kernel {}", kernel);
  std::shared_ptr<LoadedModule> loaded = load_module(*it->second.second);
  lock.unlock();
  if (dynamic_smem > 0) loaded->set_max_dynamic_shared_memory(entry->second, dynamic_smem);
  return loaded->function(entry->second);
}

std::shared_ptr<PreparedLoss> linear_ce::prepare(const LossProgram& prog, ElemType elem,
                                                 const std::string& arch) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<PreparedLoss>> memo;
  const std::string key = fmt::format("{}/{}/{}", program_hash(prog), elem_type_name(elem), arch);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  auto p = std::make_shared<PreparedLoss>();
  p->lowered = lower(prog);
  p->layout = arg_layout(p->lowered.program);
  p->elem = elem;
  p->arch = arch;
  if (memo.size() >= 256) memo.clear();  // a bound, not an LRU: programs are few in practice
  memo.emplace(key, p);
  return p;
}

void check_linear_ce_supported(const LossProgram& prog) {
  TILEJIT_USER_CHECK(prog.segments.size() <= kMaxSegments,
                     "program {}: the GPU path supports at most {} vocabulary segments, got {}",
                     prog.name, kMaxSegments, prog.segments.size());
  if (!prog.kl || prog.kl->teacher_segments.empty()) return;
  // The kernels tile the teacher's vocabulary exactly like the student's.
  const std::vector<Segment>& t = prog.kl->teacher_segments;
  bool same = t.size() == prog.segments.size();
  for (size_t i = 0; same && i < t.size(); ++i)
    same = t[i].begin == prog.segments[i].begin && t[i].end == prog.segments[i].end;
  TILEJIT_USER_CHECK(same,
                     "program {}: on the GPU the teacher's segments must start and end where the "
                     "student's do (one teacher segment per student segment); the CPU executor "
                     "takes any teacher layout over the same ids",
                     prog.name);
}

CeTileLoop linear_ce_tile_loop() {
  static const std::string value = [] {
    const char* v = std::getenv("TILEJIT_CE_LOOP");
    return std::string(v ? v : "");
  }();
  if (value == "portable") return CeTileLoop::Portable;
  TILEJIT_USER_CHECK(value.empty() || value == "sm90",
                     "TILEJIT_CE_LOOP is '{}': want 'portable' or 'sm90'", value);
  return CeTileLoop::Sm90;  // the wgmma loop where the module is compiled for sm_90a
}

std::vector<LinearCeModule> linear_ce_modules(const LossProgram& prog, DType dtype,
                                              CeTileLoop loop) {
  check_linear_ce_supported(prog);
  ElemType elem = elem_of(dtype);
  LoweredLoss l = lower(prog);
  std::vector<LinearCeModule> out;
  for (LossModule m : loss_modules()) out.push_back(make_module(l, m, elem, loop));
  return out;
}

}  // namespace tilejit
