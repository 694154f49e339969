// The CI guard for the attention kernels: every module an attention program needs (forward,
// backward with atomic dQ, deterministic backward, the shared row kernels, the sm_90a forward
// and the sm_90a backward in both modes) is generated and compiled with NVRTC, no GPU needed.
// Each module is several seconds of NVRTC, so the matrix is split: every example program for
// bf16 / d128 on sm_80 and sm_90a; the other variants and the random programs rotate through
// architectures and variants. TILEJIT_ATTENTION_NVRTC_FULL=1 compiles every example for every
// variant and arch. Each compile's time is printed. The sm_90a kernels are also held to what
// makes them fast: ptxas keeps their wgmma products asynchronous and spills nothing.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/codegen/PositionRange.h"
#include "dsl/TextForm.h"
#include "runtime/Attention.h"
#include "runtime/Nvrtc.h"
#include "runtime/ProgramKernels.h"
#include "tests/support/RandomProgram.h"
#include "tests/support/SourceTree.h"

namespace tilejit::testing {
namespace {

struct Job {
  std::string what;
  AttentionKernelSource source;
  std::string arch;
};

const AttentionVariant kVariants[] = {
    {ElemType::BF16, 128}, {ElemType::BF16, 64}, {ElemType::F16, 128}, {ElemType::F16, 64}};
const char* const kArchs[] = {"sm_80", "sm_90a"};

std::vector<AttentionProgram> example_programs() {
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(tilejit::testing::examples_dir()))
    if (e.path().extension() == ".tj") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<AttentionProgram> out;
  for (const auto& f : files) {
    ParsedProgram p = load_program(f.string());
    if (auto* a = std::get_if<AttentionProgram>(&p)) out.push_back(*a);
  }
  return out;
}

// NVRTC runs on the calling thread: its CPU time is the compile's cost on an idle machine.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The modules of `program` for `variant`, program-specific ones only unless `with_rows`.
void add_jobs(std::vector<Job>& jobs, const AttentionProgram& program,
              const AttentionVariant& variant, const std::string& arch, bool with_rows) {
  for (AttentionKernelSource& s : attention_kernel_sources(program, variant))
    if (with_rows || attention_module_uses_program(s.module))
      jobs.push_back(
          {fmt::format("{} [{}] {}", program.name, s.variant, arch), std::move(s), arch});
}

// Compiles every job on all cores; reports each failure, warning or missing entry point.
void compile_all(const std::vector<Job>& jobs) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> failures;
  double total = 0, total_cpu = 0;
  timespec p0{}, p1{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p0);
  auto worker = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      const Job& job = jobs[i];
      KernelSpec spec = attention_kernel_spec(job.source, job.source.cuda.file_name);
      try {
        double cpu0 = thread_cpu_seconds();
        CompileResult r = nvrtc_compile({.program_name = job.source.cuda.file_name,
                                         .source = spec.source,
                                         .headers = spec.headers,
                                         .options = spec.options,
                                         .arch = job.arch});
        double cpu = thread_cpu_seconds() - cpu0;
        std::lock_guard lock(mu);
        total += r.seconds;
        total_cpu += cpu;
        std::printf("  %6.2f s (cpu %5.2f s)  %s\n", r.seconds, cpu, job.what.c_str());
        std::fflush(stdout);
        if (r.cubin.empty()) failures.push_back(job.what + ": empty cubin");
        if (r.log.find("warning") != std::string::npos)
          failures.push_back(job.what + ": warnings:\n" + r.log);
        std::string_view cubin(r.cubin.data(), r.cubin.size());
        for (const std::string& entry : spec.entry_points)
          if (cubin.find(entry) == std::string_view::npos)
            failures.push_back(job.what + ": no entry point " + entry);
      } catch (const Error& e) {
        std::lock_guard lock(mu);
        failures.push_back(job.what + ":\n" + e.what());
      }
    }
  };
  unsigned n = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 8));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t) threads.emplace_back(worker);
  for (auto& t : threads) t.join();
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &p1);
  double process_cpu =
      static_cast<double>(p1.tv_sec - p0.tv_sec) + 1e-9 * (p1.tv_nsec - p0.tv_nsec);
  std::printf(
      "%zu modules, %.1f s of NVRTC (%.1f s compiling threads' cpu, %.1f s process cpu) "
      "on %u threads\n",
      jobs.size(), total, total_cpu, process_cpu, n);
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

bool full_matrix() {
  const char* v = std::getenv("TILEJIT_ATTENTION_NVRTC_FULL");
  return v && std::string_view(v) == "1";
}

// The shared module of `variant` (it does not depend on the program).
void add_rows_job(std::vector<Job>& jobs, const AttentionVariant& variant,
                  const std::string& arch) {
  AttentionKernelSource s =
      generate_attention_module(AttentionProgram(), Expr(), AttentionModule::BackwardRows, variant);
  jobs.push_back({fmt::format("[{}] {}", s.variant, arch), std::move(s), arch});
}

TEST(AttentionNvrtc, EveryExampleBf16D128BothArchs) {
  std::vector<AttentionProgram> examples = example_programs();
  ASSERT_GE(examples.size(), 8u);
  std::vector<Job> jobs;
  for (const char* arch : kArchs) {
    add_rows_job(jobs, kVariants[0], arch);
    for (const AttentionProgram& p : examples) add_jobs(jobs, p, kVariants[0], arch, false);
  }
  compile_all(jobs);
}

// bf16 / d64, f16 / d128, f16 / d64: the shared module on both archs, and one example per
// (variant, arch), rotating (all of them with TILEJIT_ATTENTION_NVRTC_FULL=1).
TEST(AttentionNvrtc, OtherVariantsRotateThroughExamples) {
  std::vector<AttentionProgram> examples = example_programs();
  ASSERT_FALSE(examples.empty());
  std::vector<Job> jobs;
  size_t turn = 0;
  for (size_t v = 1; v < std::size(kVariants); ++v)
    for (const char* arch : kArchs) {
      add_rows_job(jobs, kVariants[v], arch);
      if (full_matrix()) {
        for (const AttentionProgram& p : examples) add_jobs(jobs, p, kVariants[v], arch, false);
      } else {
        add_jobs(jobs, examples[(3 * turn++ + 1) % examples.size()], kVariants[v], arch, false);
      }
    }
  compile_all(jobs);
}

// Random programs (buffers of every element type, params, transcendentals, special floats):
// each compiles one program module, rotating through modules, variants and archs, so that over
// the set every (module, variant, arch) is covered.
TEST(AttentionNvrtc, RandomPrograms) {
  std::mt19937_64 rng(0xa77e);
  constexpr int kPrograms = 48;
  // Depth 3: a hook is inlined into every tile variant of every kernel, so deep random hooks
  // cost tens of seconds of ptxas each; tests/codegen compiles deep ones in small kernels.
  RandomProgramOptions opt;
  opt.max_depth = 3;
  const AttentionModule modules[] = {AttentionModule::Forward,
                                     AttentionModule::Backward,
                                     AttentionModule::BackwardDeterministic,
                                     AttentionModule::ForwardSm90,
                                     AttentionModule::BackwardSm90,
                                     AttentionModule::BackwardSm90Deterministic};
  constexpr int kModules = static_cast<int>(std::size(modules));
  std::vector<Job> jobs;
  for (int i = 0; i < kPrograms; ++i) {
    AttentionProgram p = random_attention_program(rng, opt);
    p.name = fmt::format("random_{}", i);
    // Module i % 6 with variant (i / 6) % 4; the arch flips after 24 programs, so every
    // (module, variant, arch) is compiled once.
    AttentionModule m = modules[i % kModules];
    const AttentionVariant& v = kVariants[(i / kModules) % 4];
    const char* arch = kArchs[(i / (kModules * 4) + i) % 2];
    for (AttentionKernelSource& s : attention_kernel_sources(p, v))
      if (s.module == m)
        jobs.push_back({fmt::format("{} [{}] {}", p.name, s.variant, arch), std::move(s), arch});
  }
  compile_all(jobs);
}

// The list `tilejit compile` and the AOT bundler use: dense_mask plus the seven attention
// modules for the requested variant, each entry point named; unsupported variants are
// UserErrors that say what is supported.
TEST(AttentionNvrtc, ProgramKernelsListTheAttentionModules) {
  AttentionProgram p = example_programs().at(0);
  std::vector<ProgramKernel> ks = program_kernels(ParsedProgram(p), {DType::F16, 64});
  ASSERT_EQ(ks.size(), 8u);
  EXPECT_EQ(ks[0].variant, "dense_mask");
  std::vector<std::string> variants;
  for (size_t i = 1; i < ks.size(); ++i) variants.push_back(ks[i].variant);
  EXPECT_EQ(variants,
            (std::vector<std::string>{"attention_fwd f16 d64", "attention_bwd_rows f16 d64",
                                      "attention_bwd f16 d64", "attention_bwd_det f16 d64",
                                      "attention_fwd_sm90 f16 d64", "attention_bwd_sm90 f16 d64",
                                      "attention_bwd_sm90_det f16 d64"}));
  EXPECT_EQ(ks[3].spec.entry_points.size(), 1u);
  EXPECT_EQ(ks[4].spec.entry_points.size(), 2u);
  EXPECT_EQ(ks[2].spec.entry_points.size(), 2u);
  EXPECT_EQ(ks[5].spec.entry_points.size(), 1u);
  EXPECT_EQ(ks[6].spec.entry_points.size(), 1u);
  EXPECT_EQ(ks[7].spec.entry_points.size(), 2u);
  for (auto [dtype, dim] : {std::pair{DType::F32, 128}, {DType::BF16, 96}, {DType::F16, 256}}) {
    try {
      program_kernels(ParsedProgram(p), {dtype, dim});
      ADD_FAILURE() << "no error for " << dtype_name(dtype) << " d" << dim;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("bf16 and f16 with head dims 64 and 128"),
                std::string::npos)
          << e.what();
    }
  }
}

// ptxas's own account of an sm_90a module: the wgmma products stay asynchronous (no
// "serialized" performance warning: a branch it cannot prove uniform inside a commit group, or
// ordinary code writing an accumulator mid-flight, would cause one), nothing spills, and the
// kernel keeps the 168-register launch allocation its setmaxnreg split is computed from
// (forward 40 * 128 + 232 * 256, backward 24 * 128 + 240 * 256, both 168 * 384).
void expect_hopper_module_asynchronous_and_spill_free(const char* program, AttentionModule module,
                                                      const AttentionVariant& variant) {
  std::vector<AttentionProgram> examples = example_programs();
  auto it = std::find_if(examples.begin(), examples.end(),
                         [&](const AttentionProgram& p) { return p.name == program; });
  ASSERT_NE(it, examples.end()) << program;
  LoweredAttention lowered = lower(*it);
  AttentionKernelSource source =
      generate_attention_module(lowered.program, lowered.score_grad, module, variant);
  KernelSpec spec = attention_kernel_spec(source, it->name);
  std::vector<std::string> options = spec.options;
  options.push_back("--ptxas-options=-v");
  CompileResult r = nvrtc_compile({.program_name = source.cuda.file_name,
                                   .source = spec.source,
                                   .headers = spec.headers,
                                   .options = options,
                                   .arch = "sm_90a"});
  const std::string what = fmt::format("{} [{}]:\n{}", program, source.variant, r.log);
  EXPECT_EQ(r.log.find("serialized"), std::string::npos) << what;
  EXPECT_EQ(r.log.find("Performance Loss"), std::string::npos) << what;
  const std::regex spills("([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  int entries = 0;
  for (auto m = std::sregex_iterator(r.log.begin(), r.log.end(), spills);
       m != std::sregex_iterator(); ++m, ++entries)
    EXPECT_TRUE((*m)[1] == "0" && (*m)[2] == "0") << "an entry point spills:\n" << what;
  EXPECT_EQ(entries, static_cast<int>(source.entries.size())) << what;
  EXPECT_NE(r.log.find("Used 168 registers"), std::string::npos) << what;
}

// The persistent forward on an index-only mask, a per-head score buffer, a mask reading buffers
// on both positions (hook parts per row and per column) and a divided score_mod (reciprocal).
TEST(AttentionNvrtc, HopperForwardStaysAsynchronousAndSpillFree) {
  expect_hopper_module_asynchronous_and_spill_free("causal", AttentionModule::ForwardSm90,
                                                   kVariants[0]);
  expect_hopper_module_asynchronous_and_spill_free("alibi_causal", AttentionModule::ForwardSm90,
                                                   kVariants[3]);
  expect_hopper_module_asynchronous_and_spill_free("document_causal",
                                                   AttentionModule::ForwardSm90, kVariants[0]);
  expect_hopper_module_asynchronous_and_spill_free("doc_softcap", AttentionModule::ForwardSm90,
                                                   kVariants[0]);
}

// The sm_90a backward in both modes (the deterministic module also holds the portable dQ
// kernel, which must not spill either), on an index-only mask and on a buffer-reading score_mod.
TEST(AttentionNvrtc, HopperBackwardStaysAsynchronousAndSpillFree) {
  expect_hopper_module_asynchronous_and_spill_free("causal", AttentionModule::BackwardSm90,
                                                   kVariants[0]);
  expect_hopper_module_asynchronous_and_spill_free("softcap_causal", AttentionModule::BackwardSm90,
                                                   kVariants[0]);
  expect_hopper_module_asynchronous_and_spill_free("softcap_causal", AttentionModule::BackwardSm90,
                                                   kVariants[3]);
  expect_hopper_module_asynchronous_and_spill_free(
      "alibi_causal", AttentionModule::BackwardSm90Deterministic, kVariants[3]);
  expect_hopper_module_asynchronous_and_spill_free(
      "document_causal", AttentionModule::BackwardSm90Deterministic, kVariants[2]);
}

// Problems whose batch, heads and sequences stay a tile's padding under kPositionLimit get the
// kernels whose hooks convert small index values without the conversion unit; larger ones the
// "_long" kernels, exact for any int32 (both compiled here, spill-free and asynchronous on
// sm_90a). Only modules with hooks differ.
TEST(AttentionNvrtc, PositionBoundedAndLongVariants) {
  const int64_t small = kPositionLimit - 256;
  EXPECT_FALSE(attention_variant(DType::BF16, 128, small).long_positions);
  EXPECT_TRUE(attention_variant(DType::BF16, 128, small + 1).long_positions);
  EXPECT_FALSE(attention_variant(DType::F16, 64).long_positions);

  std::vector<AttentionProgram> examples = example_programs();
  auto alibi = std::find_if(examples.begin(), examples.end(),
                            [](const AttentionProgram& p) { return p.name == "alibi_causal"; });
  ASSERT_NE(alibi, examples.end());
  AttentionVariant bounded = kVariants[0], long_variant = kVariants[0];
  long_variant.long_positions = true;
  auto a = attention_kernel_sources(*alibi, bounded);
  auto b = attention_kernel_sources(*alibi, long_variant);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!attention_module_uses_program(a[i].module)) {
      EXPECT_EQ(a[i].cuda.source, b[i].cuda.source);
      continue;
    }
    EXPECT_NE(a[i].cuda.source.find("tj_i2f_small("), std::string::npos) << a[i].variant;
    EXPECT_EQ(b[i].cuda.source.find("tj_i2f_small"), std::string::npos) << b[i].variant;
    EXPECT_NE(a[i].cuda.entry, b[i].cuda.entry);
  }
  expect_hopper_module_asynchronous_and_spill_free("alibi_causal", AttentionModule::ForwardSm90,
                                                   long_variant);
  expect_hopper_module_asynchronous_and_spill_free("alibi_causal", AttentionModule::BackwardSm90,
                                                   long_variant);
}

// Bound values and shapes never change the generated source: only structure, dtype and head
// dim select a kernel.
TEST(AttentionNvrtc, SourceDependsOnlyOnStructureAndVariant) {
  AttentionProgram p = example_programs().at(0);
  auto a = attention_kernel_sources(p, kVariants[0]);
  auto b = attention_kernel_sources(p, kVariants[0]);
  auto c = attention_kernel_sources(p, kVariants[3]);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].cuda.source, b[i].cuda.source);
    EXPECT_NE(a[i].cuda.source, c[i].cuda.source);
    EXPECT_NE(a[i].cuda.entry.find("bf16_d128"), std::string::npos);
  }
}

}  // namespace
}  // namespace tilejit::testing
