// The CI guard for the loss kernels: every kernel module each example loss program needs
// (runtime/ProgramKernels.h, as `tilejit compile LOSS.tj --emit cubin` lists them) compiles with
// NVRTC for sm_80 and sm_90a, through a kernel cache in a temporary directory. Needs NVRTC only,
// no GPU. Also checks the generated glue: stable extern "C" names, shared modules that do not
// depend on the program, and the clear refusal of a KL term.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/codegen/LossKernels.h"
#include "dsl/TextForm.h"
#include "runtime/LinearCe.h"
#include "runtime/Nvrtc.h"
#include "runtime/ProgramKernels.h"
#include "tests/runtime/RuntimeTestSupport.h"
#include "tests/support/SourceTree.h"

namespace tilejit::testing {
namespace {

std::string example(const std::string& name) {
  return tilejit::testing::examples_dir() + "/" + name + ".tj";
}

const LossProgram& loss_of(const ParsedProgram& p) { return std::get<LossProgram>(p); }

// ptxas -v reports one "stack frame / spill" line per entry point: all zero, one per entry.
void expect_no_local_memory(const std::string& log, size_t entry_count, const std::string& what) {
  static const std::regex frame(
      "([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  size_t entries = 0;
  for (auto f = std::sregex_iterator(log.begin(), log.end(), frame); f != std::sregex_iterator();
       ++f, ++entries)
    EXPECT_TRUE((*f)[1] == "0" && (*f)[2] == "0" && (*f)[3] == "0")
        << "an entry point spills or uses local memory:\n"
        << what;
  EXPECT_EQ(entries, entry_count) << what;
}

// A module compiled for `arch` with ptxas's per-entry account (registers, stack, spills) in the
// log, and the PTX when asked for.
CompileResult compile_verbose(const LinearCeModule& m, const char* arch, bool want_ptx = false) {
  std::vector<std::string> options = m.spec.options;
  options.push_back("--ptxas-options=-v");
  return nvrtc_compile({.program_name = m.source.cuda.file_name,
                        .source = m.spec.source,
                        .headers = m.spec.headers,
                        .options = options,
                        .arch = arch,
                        .want_ptx = want_ptx});
}

TEST(LinearCeCodegen, EntryNamesAreStableAndUnmangled) {
  LoweredLoss l = lower(loss_of(load_program(example("two_segments"))));
  const std::string hash16 = l.hash.substr(0, 16);
  LossKernelSource fwd =
      generate_loss_module(l.program, l.logit_grad, LossModule::Forward, ElemType::BF16);
  EXPECT_EQ(fwd.entries.at("linear_ce_fwd"), "tj_linear_ce_fwd_bf16_" + hash16);
  EXPECT_EQ(fwd.cuda.entry, fwd.entries.at("linear_ce_fwd"));
  EXPECT_NE(fwd.cuda.source.find(
                "__launch_bounds__(tilejit_ce::CeFwdCtaOf<kSm90Loop>::type::kThreads, 1)"),
            std::string::npos);
  LossKernelSource grad =
      generate_loss_module(l.program, l.logit_grad, LossModule::Gradient, ElemType::F16);
  EXPECT_EQ(grad.entries.at("linear_ce_grad"), "tj_linear_ce_grad_f16_" + hash16);
  EXPECT_EQ(grad.entries.at("linear_ce_target_grad"), "tj_linear_ce_target_grad_f16_" + hash16);
  EXPECT_NE(grad.cuda.source.find("constexpr bool kF16 = true;"), std::string::npos);
  LossKernelSource products =
      generate_loss_module(l.program, l.logit_grad, LossModule::Products, ElemType::BF16);
  EXPECT_EQ(products.entries.at("linear_ce_dweight"), "tj_linear_ce_dweight_bf16");
  LossKernelSource rows =
      generate_loss_module(l.program, l.logit_grad, LossModule::Rows, ElemType::BF16);
  EXPECT_EQ(rows.entries.at("linear_ce_merge"), "tj_linear_ce_merge");
  EXPECT_EQ(rows.entries.at("linear_ce_average_logit"), "tj_linear_ce_average_logit");
  EXPECT_EQ(rows.entries.at("linear_ce_stage_weights"), "tj_linear_ce_stage_weights");
  EXPECT_EQ(rows.entries.at("linear_ce_pair_offsets"), "tj_linear_ce_pair_offsets");
  EXPECT_EQ(rows.entries.at("linear_ce_pair_list"), "tj_linear_ce_pair_list");
  EXPECT_EQ(rows.entries.at("linear_ce_pair_visit"), "tj_linear_ce_pair_visit");
  EXPECT_EQ(rows.entries.at("linear_ce_radix_scatter"), "tj_linear_ce_radix_scatter");
  EXPECT_EQ(rows.entries.at("linear_ce_move_cycles"), "tj_linear_ce_move_cycles");
  EXPECT_EQ(rows.entries.size(), 26u);
  for (const LossKernelSource* m : {&fwd, &grad, &products, &rows})
    for (const auto& [kernel, entry] : m->entries) {
      EXPECT_TRUE(entry.starts_with("tj_" + kernel)) << entry;
      EXPECT_NE(m->cuda.source.find(" " + entry + "(\n"), std::string::npos) << entry;
    }
}

TEST(LinearCeCodegen, SharedModulesDoNotDependOnTheProgram) {
  LoweredLoss a = lower(loss_of(load_program(example("llama3"))));
  LoweredLoss b = lower(loss_of(load_program(example("gemma2_softcap"))));
  for (LossModule m : {LossModule::Rows, LossModule::Products}) {
    EXPECT_EQ(generate_loss_module(a.program, a.logit_grad, m, ElemType::BF16).cuda.source,
              generate_loss_module(b.program, b.logit_grad, m, ElemType::BF16).cuda.source);
  }
  EXPECT_NE(generate_loss_module(a.program, a.logit_grad, LossModule::Forward, ElemType::BF16)
                .cuda.source,
            generate_loss_module(b.program, b.logit_grad, LossModule::Forward, ElemType::BF16)
                .cuda.source);
}

TEST(LinearCeCodegen, SoftcapHooksAreGenerated) {
  LoweredLoss l = lower(loss_of(load_program(example("gemma2_softcap"))));
  LossKernelSource fwd =
      generate_loss_module(l.program, l.logit_grad, LossModule::Forward, ElemType::BF16);
  EXPECT_NE(fwd.cuda.source.find("static constexpr bool kLogitIsIdentity = false;"),
            std::string::npos);
  EXPECT_NE(fwd.cuda.source.find("logit_grad(const TjArgs& a"), std::string::npos);
  EXPECT_NE(fwd.cuda.source.find("float cap;"), std::string::npos);
}

// A KL program's own modules hold the KL kernels instead of the plain ones (the teacher's tiles
// are recomputed alongside the student's); the shared modules are the same for every program.
TEST(LinearCeCodegen, KlProgramGetsTheKlKernels) {
  LoweredLoss kl = lower(loss_of(load_program(example("distill"))));
  LoweredLoss plain = lower(loss_of(load_program(example("llama3"))));
  auto entries = [](const LoweredLoss& l, LossModule m) {
    std::vector<std::string> names;
    for (const auto& [kernel, entry] :
         generate_loss_module(l.program, l.logit_grad, m, ElemType::BF16).entries)
      names.push_back(kernel);
    return names;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(entries(kl, LossModule::Forward), V{"linear_ce_fwd_kl"});
  EXPECT_EQ(entries(plain, LossModule::Forward), V{"linear_ce_fwd"});
  EXPECT_EQ(entries(kl, LossModule::Gradient),
            (V{"linear_ce_grad_kl", "linear_ce_target_grad_kl"}));
  EXPECT_EQ(entries(plain, LossModule::Gradient), (V{"linear_ce_grad", "linear_ce_target_grad"}));
  EXPECT_EQ(entries(kl, LossModule::Rows), entries(plain, LossModule::Rows));
}

// The tile loop is part of the Forward, Gradient and Products modules' source (the kernel cache
// keys on it), a KL program's too (linear_ce_fwd_kl, linear_ce_grad_kl); the Rows module does not
// depend on it. The Products module is every program's, KL or not.
TEST(LinearCeCodegen, TileLoopIsPartOfTheTensorCoreModulesSource) {
  LoweredLoss l = lower(loss_of(load_program(example("gemma2_softcap"))));
  auto source = [&](LossModule m, CeTileLoop loop) {
    return generate_loss_module(l.program, l.logit_grad, m, ElemType::BF16, loop).cuda.source;
  };
  const std::string portable = source(LossModule::Forward, CeTileLoop::Portable);
  const std::string sm90 = source(LossModule::Forward, CeTileLoop::Sm90);
  EXPECT_NE(portable.find("constexpr bool kSm90Loop = false;"), std::string::npos);
  EXPECT_NE(sm90.find("constexpr bool kSm90Loop = true;"), std::string::npos);
  EXPECT_NE(sm90.find("tilejit_ce::linear_ce_fwd<TjProgram, TjArgs, kF16, kSm90Loop>("),
            std::string::npos);
  EXPECT_NE(source(LossModule::Gradient, CeTileLoop::Sm90)
                .find("tilejit_ce::linear_ce_grad<TjProgram, TjArgs, kF16, kSm90Loop>("),
            std::string::npos);
  const std::string products = source(LossModule::Products, CeTileLoop::Sm90);
  EXPECT_NE(products.find("constexpr bool kSm90Loop = true;"), std::string::npos);
  EXPECT_NE(products.find("tilejit_ce::linear_ce_dhidden<kF16, kSm90Loop>("), std::string::npos);
  EXPECT_NE(products.find("tilejit_ce::linear_ce_dweight<kF16, kSm90Loop>("), std::string::npos);
  for (LossModule m : {LossModule::Gradient, LossModule::Products})
    EXPECT_NE(source(m, CeTileLoop::Portable), source(m, CeTileLoop::Sm90)) << loss_module_name(m);
  EXPECT_EQ(source(LossModule::Rows, CeTileLoop::Portable),
            source(LossModule::Rows, CeTileLoop::Sm90));
  LoweredLoss kl = lower(loss_of(load_program(example("distill"))));
  for (LossModule m : loss_modules()) {
    auto kl_source = [&](CeTileLoop loop) {
      return generate_loss_module(kl.program, kl.logit_grad, m, ElemType::BF16, loop).cuda.source;
    };
    if (m == LossModule::Products) {
      EXPECT_EQ(kl_source(CeTileLoop::Sm90), products);
      EXPECT_EQ(kl_source(CeTileLoop::Portable), source(m, CeTileLoop::Portable));
    } else if (m == LossModule::Forward || m == LossModule::Gradient) {
      const std::string call =
          m == LossModule::Forward
              ? "tilejit_ce::linear_ce_fwd_kl<TjProgram, TjArgs, kF16, kSm90Loop>("
              : "tilejit_ce::linear_ce_grad_kl<TjProgram, TjArgs, kF16, kSm90Loop>(";
      EXPECT_NE(kl_source(CeTileLoop::Sm90).find(call), std::string::npos) << loss_module_name(m);
      EXPECT_NE(kl_source(CeTileLoop::Sm90).find("constexpr bool kSm90Loop = true;"),
                std::string::npos);
      EXPECT_NE(kl_source(CeTileLoop::Portable).find("constexpr bool kSm90Loop = false;"),
                std::string::npos);
    } else {
      EXPECT_EQ(kl_source(CeTileLoop::Portable), kl_source(CeTileLoop::Sm90))
          << loss_module_name(m);
    }
  }
}

// The Hopper loop's forward, gradient and product modules compile for sm_90a (wgmma) and for
// sm_80 (where the module falls back to the portable loop), with and without a logit_mod and for
// both element types; so does the Rows module (the pre-pass, the sort, the row kernels).
TEST(LinearCeCompile, HopperTileLoopCompilesForSm80AndSm90a) {
  test::TempDir dir;
  KernelCacheOptions options;
  options.dir = dir.path();
  KernelCache cache(options);
  const std::vector<LossModule> looped = {LossModule::Forward, LossModule::Gradient,
                                          LossModule::Products};
  for (const char* name : {"llama3", "gemma2_softcap"})
    for (DType dtype : {DType::BF16, DType::F16}) {
      const LossProgram prog = loss_of(load_program(example(name)));
      std::map<std::pair<LossModule, bool>, std::vector<char>> cubins;  // sm_90a, (module, sm90)
      for (CeTileLoop loop : {CeTileLoop::Portable, CeTileLoop::Sm90})
        for (LinearCeModule& m : linear_ce_modules(prog, dtype, loop)) {
          // (the Rows module, which has no tile loop, too: the cache compiles it once)
          const bool is_looped =
              std::find(looped.begin(), looped.end(), m.source.module) != looped.end();
          for (const char* arch : {"sm_90a", "sm_80"}) {
            std::shared_ptr<const CompiledKernel> k;
            ASSERT_NO_THROW(k = cache.get(m.spec, arch))
                << name << " " << loss_module_name(m.source.module) << " " << arch;
            EXPECT_FALSE(k->cubin.empty()) << name << " " << arch;
            if (is_looped && std::string(arch) == "sm_90a")
              cubins[{m.source.module, loop == CeTileLoop::Sm90}] = k->cubin;
          }
        }
      for (LossModule m : looped)
        EXPECT_NE(cubins[std::make_pair(m, false)], cubins[std::make_pair(m, true)])
            << name << " " << loss_module_name(m) << ": the loop choice changed no code on sm_90a";
    }
}

// ptxas's account of a module compiled for sm_90a: its wgmma products asynchronous (no
// "serialized" performance warning: a branch inside a commit group, or ordinary code writing an
// accumulator while products may be in flight, would cause one; no wait for them injected where
// ptxas cannot tell they are done), no entry point spilling or keeping a stack frame, and an
// entry named `entry` among them. Prints the account (registers per entry point, for the
// record).
void expect_asynchronous_and_spill_free(LinearCeModule& m, std::string_view entry) {
  CompileResult r = compile_verbose(m, "sm_90a");
  const std::string what = fmt::format("[{}]:\n{}", m.source.variant, r.log);
  std::printf("%s\n", what.c_str());
  EXPECT_EQ(r.log.find("serialized"), std::string::npos) << what;
  EXPECT_EQ(r.log.find("Performance Loss"), std::string::npos) << what;
  // (C7517: a wait for the products that ptxas inserts where it cannot tell they are done)
  EXPECT_EQ(r.log.find("warpgroup.wait is injected"), std::string::npos) << what;
  expect_no_local_memory(r.log, m.source.entries.size(), what);
  EXPECT_NE(r.log.find(entry), std::string::npos) << what;
}

// The sm_90a products module, both element types (the accumulators, two n128 halves per
// fragment, stay in registers).
TEST(LinearCeCompile, HopperProductsStayAsynchronousAndSpillFree) {
  const LossProgram prog = loss_of(load_program(example("llama3")));
  for (DType dtype : {DType::BF16, DType::F16})
    for (LinearCeModule& m : linear_ce_modules(prog, dtype, CeTileLoop::Sm90))
      if (m.source.module == LossModule::Products)
        expect_asynchronous_and_spill_free(m, "tj_linear_ce_dhidden_");
}

// A KL program's forward and gradient tiles (linear_ce_fwd_kl, linear_ce_grad_kl) on the Hopper
// loop, both element types: on sm_90a the student's and the teacher's tiles each keep registers
// of their own through the products (gemm_loop_sm90_ws_joint), which stay asynchronous (no
// "serialized" warning), and nothing spills or keeps a stack frame; the modules also compile for
// sm_80, where they run the portable loop.
TEST(LinearCeCompile, KlTilesOnTheHopperLoopStayAsynchronousAndSpillFree) {
  const LossProgram prog = loss_of(load_program(example("distill")));
  for (DType dtype : {DType::BF16, DType::F16})
    for (LinearCeModule& m : linear_ce_modules(prog, dtype, CeTileLoop::Sm90)) {
      const LossModule module = m.source.module;
      if (module != LossModule::Forward && module != LossModule::Gradient) continue;
      expect_asynchronous_and_spill_free(
          m, module == LossModule::Forward ? "tj_linear_ce_fwd_kl_" : "tj_linear_ce_grad_kl_");
      EXPECT_NO_THROW(compile_verbose(m, "sm_80")) << m.source.variant;
    }
}

// A KL term at temperature 1 compiles without the tempered student's exponentials (z / T is z:
// the forward's tempered sum is the plain one, the gradient's q_v is p_v), so its forward and
// gradient tiles issue fewer ex2 than the same program's at temperature 2; both stay
// asynchronous and spill-free on sm_90a.
TEST(LinearCeCompile, KlAtTemperatureOneSkipsTheTemperedExponentials) {
  LossProgram prog = loss_of(load_program(example("distill")));
  ASSERT_TRUE(prog.kl && prog.kl->temperature == 1);
  const std::regex ex2("\\bex2\\.approx\\b");
  std::map<std::pair<double, LossModule>, long> exps;
  for (double temperature : {1.0, 2.0}) {
    prog.kl->temperature = temperature;
    for (LinearCeModule& m : linear_ce_modules(prog, DType::BF16, CeTileLoop::Sm90)) {
      const LossModule module = m.source.module;
      if (module != LossModule::Forward && module != LossModule::Gradient) continue;
      CompileResult r = compile_verbose(m, "sm_90a", /*want_ptx=*/true);
      const std::string what = fmt::format("[T {} {}]:\n{}", temperature, m.source.variant, r.log);
      EXPECT_EQ(r.log.find("serialized"), std::string::npos) << what;
      expect_no_local_memory(r.log, m.source.entries.size(), what);
      exps[{temperature, module}] = std::distance(
          std::sregex_iterator(r.ptx.begin(), r.ptx.end(), ex2), std::sregex_iterator());
    }
  }
  for (LossModule module : {LossModule::Forward, LossModule::Gradient}) {
    const long at_one = exps[{1.0, module}], at_two = exps[{2.0, module}];
    fmt::print("{}: ex2 in the PTX at T 1: {}, at T 2: {}\n", loss_module_name(module), at_one,
               at_two);
    EXPECT_GT(at_one, 0) << loss_module_name(module);
    EXPECT_LT(at_one, at_two) << loss_module_name(module) << ": ex2 at T 1 / T 2";
  }
}

// Gemma 2's soft-cap `cap * tanh(logit / cap)` in the program modules, both tile loops, sm_90a
// and sm_80: the division by cap is hoisted out of the per-logit hooks (the forward divides
// nowhere; the gradient module only where its hooks' constant parts are computed, once per
// thread: 1 / cap in logit_grad as lowered), and no entry point spills or keeps a stack frame.
TEST(LinearCeCompile, SoftcapModulesHoistTheDivisionAndDoNotSpill) {
  const LossProgram prog = loss_of(load_program(example("gemma2_softcap")));
  const std::regex f32_division("\\bdiv\\.[a-z.]*f32\\b");
  for (CeTileLoop loop : {CeTileLoop::Portable, CeTileLoop::Sm90})
    for (LinearCeModule& m : linear_ce_modules(prog, DType::BF16, loop)) {
      const LossModule module = m.source.module;
      if (module != LossModule::Forward && module != LossModule::Gradient) continue;
      for (const char* arch : {"sm_90a", "sm_80"}) {
        CompileResult r = compile_verbose(m, arch, /*want_ptx=*/true);
        const std::string what = fmt::format("[{} {}]:\n{}", m.source.variant, arch, r.log);
        const auto divisions = std::distance(
            std::sregex_iterator(r.ptx.begin(), r.ptx.end(), f32_division), std::sregex_iterator());
        if (module == LossModule::Forward)
          EXPECT_EQ(divisions, 0) << "an f32 division in the forward: " << what;
        else  // linear_ce_grad and linear_ce_target_grad: 1 / cap once each
          EXPECT_LE(divisions, 2) << "f32 divisions per logit in the gradient: " << what;
        EXPECT_NE(r.ptx.find("rcp.rn.f32"), std::string::npos) << "no reciprocal of cap: " << what;
        expect_no_local_memory(r.log, m.source.entries.size(), what);
      }
    }
}

TEST(LinearCeCompile, TeacherLayoutCutElsewhereIsRefusedClearly) {
  LossProgram prog = loss_of(load_program(example("distill")));
  prog.kl->teacher_segments = {{"lo", 0, 1000, "T_lo", ""}, {"hi", 1000, 248320, "T_hi", ""}};
  try {
    check_linear_ce_supported(prog);
    FAIL() << "a teacher layout cut elsewhere than the student's was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("must start and end where the student's do"),
              std::string::npos)
        << e.what();
  }
}

TEST(LinearCeCompile, OnlyBf16AndF16Operands) {
  KernelVariantOptions v;
  v.dtype = DType::F32;
  EXPECT_THROW(program_kernels(load_program(example("llama3")), v), UserError);
}

struct Job {
  std::string program, arch;
  ProgramKernel kernel;
};

// Every module of every example loss program, both archs; prints the compile times.
TEST(LinearCeCompile, ExampleProgramsCompileForSm80AndSm90a) {
  test::TempDir dir;
  KernelCacheOptions options;
  options.dir = dir.path();
  KernelCache cache(options);
  std::vector<Job> jobs;
  for (const char* arch : {"sm_90a", "sm_80"})
    for (const char* name : {"llama3", "gemma2_softcap", "two_segments", "distill"})
      for (ProgramKernel& k : program_kernels(load_program(example(name))))
        jobs.push_back({name, arch, std::move(k)});
  ASSERT_EQ(jobs.size(), 32u);  // 4 modules x 4 programs x 2 archs

  std::atomic<size_t> next{0};
  std::mutex mu;
  std::vector<std::string> lines, failures;
  auto worker = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      const Job& j = jobs[i];
      try {
        CompiledKernel::Source how = CompiledKernel::Compiled;
        auto k = cache.get(j.kernel.spec, j.arch, &how);
        std::lock_guard<std::mutex> lock(mu);
        if (k->cubin.empty()) failures.push_back(j.kernel.source.entry + ": empty cubin");
        for (const std::string& e : k->entry_points)
          if (!e.starts_with("tj_linear_ce_")) failures.push_back("unexpected entry " + e);
        lines.push_back(fmt::format("{:<16} {:<7} {:<24} {:>7.2f} s{}", j.program, j.arch,
                                    j.kernel.variant, k->compile_seconds,
                                    how == CompiledKernel::Compiled ? "" : "  (shared)"));
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(fmt::format("{} {} {}: {}", j.program, j.arch, j.kernel.variant,
                                       std::string(e.what()).substr(0, 4000)));
      }
    }
  };
  std::vector<std::thread> pool;
  unsigned threads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  std::sort(lines.begin(), lines.end());
  for (const std::string& l : lines) std::printf("%s\n", l.c_str());
  for (const std::string& f : failures) ADD_FAILURE() << f;
  // Rows and products are shared by all four programs: 2 + 4 * 2 compiles per arch.
  EXPECT_EQ(cache.stats().compiles, 20u);
}

}  // namespace
}  // namespace tilejit::testing
