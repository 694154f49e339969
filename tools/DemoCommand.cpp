// `tilejit demo`: the main job, end to end. Compiles a few standard programs (cold, then from
// the disk cache, then from memory), then runs attention and a segmented loss on the GPU when
// there is one, else on the CPU backend, checking each result against the fp64 reference.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/Printer.h"
#include "dsl/Stdlib.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Nvrtc.h"
#include "runtime/ProgramKernels.h"
#include "runtime/Version.h"
#include "tools/CommandLine.h"
#include "tools/DemoRun.h"

namespace tilejit::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Cold compile into a fresh directory, a disk hit from a second cache on that directory, and a
// memory hit: what a first run, a later process and a later call each pay.
void compile_section(const std::string& arch, bool quick) {
  auto dir = std::filesystem::temp_directory_path() /
             fmt::format("tilejit-demo-{}", std::chrono::steady_clock::now().time_since_epoch().count());
  KernelCacheOptions opt;
  opt.dir = dir;
  opt.offline = false;
  KernelCache cold(opt);
  std::vector<ProgramKernel> kernels;
  // A few programs, every kernel each needs (--quick: the forward only).
  std::vector<AttentionProgram> programs;
  for (const char* name : {"causal", "sliding_window", "doc_softcap"})
    programs.push_back(stdlib::standard_attention_program(name));
  for (const AttentionProgram& p : programs)
    for (ProgramKernel& k : program_kernels(p, {}))
      if (!quick || k.variant == "dense_mask" || k.variant.rfind("attention_fwd", 0) == 0)
        kernels.push_back(std::move(k));
  for (const LossProgram& p : stdlib::standard_loss_programs()) {
    if (p.kl) continue;  // the GPU loss kernels do not take a KL term yet
    for (ProgramKernel& k : program_kernels(p, {})) kernels.push_back(std::move(k));
    break;
  }

  std::printf("\n1. Compile for %s (fresh cache dir %s)\n", arch.c_str(), dir.c_str());
  std::printf("   %-22s %-28s %10s %12s %12s\n", "program", "kernel", "cold s", "disk-hit ms",
              "memory-hit us");
  double total_cold = 0;
  KernelCache warm(opt);
  for (const ProgramKernel& k : kernels) {
    auto t0 = std::chrono::steady_clock::now();
    cold.get(k.spec, arch);
    double c = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    warm.get(k.spec, arch);
    double d = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    warm.get(k.spec, arch);
    double m = seconds_since(t0);
    total_cold += c;
    std::printf("   %-22s %-28s %10.3f %12.2f %12.1f\n", k.spec.program_name.c_str(),
                k.variant.c_str(), c, d * 1e3, m * 1e6);
  }
  KernelCacheStats s = warm.stats();
  std::printf("   %zu kernels: %.2f s cold in all; second cache: %llu disk hits, %llu memory hits, "
              "%llu compiles\n",
              kernels.size(), total_cold, (unsigned long long)s.disk_hits,
              (unsigned long long)s.memory_hits, (unsigned long long)s.compiles);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace

int run_demo(const CommandLine& cmd) {
  bool quick = cmd.has("quick");
  Driver* driver = Driver::get();
  std::string arch = driver ? device_arch(0) : "sm_90a";
  std::printf("tilejit %s demo (NVRTC %s)\n", std::string(version()).c_str(),
              nvrtc_version().c_str());
  if (driver)
    std::printf("device: GPU 0, %s\n", arch.c_str());
  else
    std::printf("device: no GPU (%s): kernels are compiled, programs run on the CPU backend\n",
                Driver::unavailable_reason().c_str());
  compile_section(arch, quick);
  return run_demo_workloads(driver != nullptr, quick);
}

}  // namespace tilejit::cli
