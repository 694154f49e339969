// The CI guard for code generation: generated kernels must compile. Every hand-built golden
// program, every standard/example program and a few hundred random ones are generated and
// compiled with NVRTC for sm_80 and sm_90a. Needs NVRTC only, no GPU. Compiles run on all cores.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "compiler/Differentiate.h"
#include "compiler/Lower.h"
#include "compiler/codegen/CudaCodegen.h"
#include "dsl/Stdlib.h"
#include "dsl/TextForm.h"
#include "runtime/DenseMask.h"
#include "runtime/Nvrtc.h"
#include "tests/codegen/CodegenTestPrograms.h"
#include "tests/support/RandomProgram.h"
#include "tests/support/SourceTree.h"

namespace tilejit::testing {
namespace {

const char* const kArchs[] = {"sm_80", "sm_90a"};

struct Job {
  std::string what;
  CudaSource source;
};

CompileRequest request(const CudaSource& s, const std::string& arch) {
  KernelSpec spec = kernel_spec(s, s.file_name);
  return {.program_name = s.file_name,
          .source = spec.source,
          .headers = spec.headers,
          .options = spec.options,
          .arch = arch,
          .want_ptx = false};
}

// Compiles every job for `arch` on all cores; reports each failure with its program.
void compile_all(const std::vector<Job>& jobs, const std::string& arch) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  double total = 0, worst = 0;
  auto worker = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      try {
        CompileResult r = nvrtc_compile(request(jobs[i].source, arch));
        std::lock_guard<std::mutex> lock(mu);
        total += r.seconds;
        worst = std::max(worst, r.seconds);
        if (r.cubin.empty()) failures.push_back(jobs[i].what + ": empty cubin");
        // Generated code compiles without warnings.
        if (r.log.find_first_not_of(" \n\r\t") != std::string::npos &&
            r.log.find("warning") != std::string::npos)
          failures.push_back(fmt::format("{} ({}): warnings:\n{}", jobs[i].what, arch, r.log));
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(fmt::format("{} ({}):\n{}", jobs[i].what, arch, e.what()));
      }
    }
  };
  unsigned n = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 8));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  ::testing::Test::RecordProperty("nvrtc_seconds_" + arch, fmt::format("{:.2f}", total));
  fmt::print("{} kernels for {}: {:.2f} s of NVRTC in total, {:.3f} s mean, {:.3f} s worst\n",
             jobs.size(), arch, total, total / std::max<size_t>(jobs.size(), 1), worst);
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

// The full hook set: the lowered program and its derivative, as the attention kernels get them.
CudaSource lowered_source(const AttentionProgram& p) {
  LoweredAttention l = lower(p);
  return generate_dense_mask(l.program, l.score_grad);
}

// A random program need not be valid (e.g. a division the simplifier folds to a constant is
// fine, but nothing stops it being ill-formed): lower what lowers, compile the rest as is.
CudaSource random_source(const AttentionProgram& p) {
  try {
    return lowered_source(p);
  } catch (const UserError&) {
    return generate_dense_mask(p, differentiate(p.score, var::score));
  }
}

TEST(NvrtcCompile, GoldenPrograms) {
  std::vector<Job> jobs;
  for (auto make : {golden_doc_softcap, golden_select_branches, golden_plain}) {
    Expr grad;
    AttentionProgram p = make(&grad);
    jobs.push_back({p.name, generate_dense_mask(p, grad)});
  }
  for (const char* arch : kArchs) compile_all(jobs, arch);
}

TEST(NvrtcCompile, StandardPrograms) {
  std::vector<Job> jobs;
  for (const AttentionProgram& p : stdlib::standard_attention_programs())
    jobs.push_back({p.name, lowered_source(p)});
  ASSERT_FALSE(jobs.empty());
  for (const char* arch : kArchs) compile_all(jobs, arch);
}

// A loss program's hooks in a minimal kernel that calls both, as the loss kernels do (their parts
// through linear_ce_hook_parts.cuh) and per logit alone.
CudaSource loss_hooks_source(const LossProgram& p, const Expr& grad) {
  CudaSource s;
  s.entry = "tj_loss_hooks_check";
  s.file_name = fmt::format("loss_hooks_{}.cu", p.name);
  s.headers = {"common.cuh", "linear_ce_hook_parts.cuh"};
  s.layout = arg_layout(p);
  s.source = "#include \"common.cuh\"\n#include \"linear_ce_hook_parts.cuh\"\n" +
             generate_args_struct(s.layout) + generate_hooks(p, grad) +
             "extern \"C\" __global__ void tj_loss_hooks_check(const __grid_constant__ TjArgs a, "
             "float* out) {\n"
             "  const tilejit_ce::LogitHooks<TjProgram, TjArgs, true> hooks(a);\n"
             "  const auto at = hooks.at_row(blockIdx.x);\n"
             "  const float x = out[threadIdx.x];\n"
             "  out[threadIdx.x] = at.mod(x, threadIdx.x) + at.grad(x, threadIdx.x) +\n"
             "      TjProgram::logit_mod(a, x, blockIdx.x, threadIdx.x) +\n"
             "      TjProgram::logit_grad(a, x, blockIdx.x, threadIdx.x);\n}\n";
  return s;
}

TEST(NvrtcCompile, GoldenLossPrograms) {
  std::vector<Job> jobs;
  for (auto make : {golden_loss_softcap, golden_loss_row_temperature}) {
    Expr grad;
    LossProgram p = make(&grad);
    jobs.push_back({p.name, loss_hooks_source(p, grad)});
  }
  for (const char* arch : kArchs) compile_all(jobs, arch);
}

TEST(NvrtcCompile, ExamplePrograms) {
  std::vector<Job> jobs;
  std::vector<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(tilejit::testing::examples_dir()))
    if (entry.path().extension() == ".tj") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  for (const auto& file : files) {
    ParsedProgram parsed = load_program(file.string());
    if (auto* a = std::get_if<AttentionProgram>(&parsed)) {
      jobs.push_back({file.filename().string(), lowered_source(*a)});
    } else {
      LoweredLoss l = lower(std::get<LossProgram>(parsed));
      jobs.push_back({file.filename().string(), loss_hooks_source(l.program, l.logit_grad)});
    }
  }
  for (const char* arch : kArchs) compile_all(jobs, arch);
}

// Random programs: different ones per arch, so the two runs cover twice as many shapes.
TEST(NvrtcCompile, RandomPrograms) {
  constexpr int kPerArch = 100;
  std::mt19937_64 rng(20261129);
  for (const char* arch : kArchs) {
    std::vector<Job> jobs;
    for (int i = 0; i < kPerArch; ++i) {
      AttentionProgram p = random_attention_program(rng);
      p.name = fmt::format("random_{}_{}", arch, i);
      jobs.push_back({p.name, random_source(p)});
    }
    for (int i = 0; i < kPerArch / 4; ++i) {
      LossProgram p = random_loss_program(rng);
      p.name = fmt::format("random_loss_{}_{}", arch, i);
      jobs.push_back({p.name, loss_hooks_source(p, differentiate(p.logit, var::logit))});
    }
    compile_all(jobs, arch);
  }
}

// Compile-only through the kernel cache, as the CLI and AOT use it: no GPU needed.
TEST(NvrtcCompile, CompileDenseMaskThroughTheCache) {
  KernelCache cache(KernelCacheOptions{.dir = {}, .use_disk = false});
  Expr grad;
  AttentionProgram p = golden_doc_softcap(&grad);
  std::vector<CompiledKernel> kernels = compile_dense_mask(p, "sm_80", cache);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].arch, "sm_80");
  EXPECT_FALSE(kernels[0].cubin.empty());
  EXPECT_EQ(kernels[0].entry_points, std::vector<std::string>{dense_mask_source(p).entry});
  // A different binding never changes the kernel; a different program does.
  AttentionProgram q = p;
  q.mask = dsl::q >= dsl::kv;
  EXPECT_NE(compile_dense_mask(q, "sm_80", cache)[0].key, kernels[0].key);
  EXPECT_EQ(compile_dense_mask(p, "sm_80", cache)[0].key, kernels[0].key);
}

}  // namespace
}  // namespace tilejit::testing
