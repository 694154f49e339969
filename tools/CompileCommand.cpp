// `tilejit compile FILE.tj [--arch sm_80|sm_90a] [--emit ir|cuda|ptx|cubin] [--out PATH]`
//
//   ir     the program after the passes (validate, simplify) and its derivative
//   cuda   the generated translation units, one per kernel the program needs
//   ptx    NVRTC's PTX of each
//   cubin  compile every kernel through the kernel cache (TILEJIT_OFFLINE=1: load only);
//          with --out, the cubin (one kernel) or one file per kernel in the --out directory
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <variant>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "dsl/TextForm.h"
#include "runtime/Nvrtc.h"
#include "tools/CommandLine.h"
#include "runtime/ProgramKernels.h"

namespace tilejit::cli {

namespace {

void write_text(const std::string& path, const std::string& text) {
  if (path.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return;
  }
  std::ofstream f(path, std::ios::binary);
  TILEJIT_USER_CHECK(f.good(), "cannot write '{}'", path);
  f << text;
}

std::string lowered_ir(const ParsedProgram& parsed) {
  if (auto* a = std::get_if<AttentionProgram>(&parsed)) {
    LoweredAttention l = lower(*a);
    return print_program(l.program) + "# d score / d score = " + print_expr(l.score_grad) + "\n";
  }
  LoweredLoss l = lower(std::get<LossProgram>(parsed));
  return print_program(l.program) + "# d logit / d logit = " + print_expr(l.logit_grad) + "\n";
}

KernelVariantOptions variant_options(const CommandLine& cmd) {
  KernelVariantOptions v;
  std::string dtype = cmd.get("dtype", "bf16");
  TILEJIT_USER_CHECK(dtype == "bf16" || dtype == "fp16", "--dtype must be bf16 or fp16, got '{}'",
                     dtype);
  v.dtype = dtype == "bf16" ? DType::BF16 : DType::F16;
  v.head_dim = static_cast<int>(cmd.get_int("head-dim", 128));
  return v;
}

}  // namespace

int run_compile(const CommandLine& cmd) {
  TILEJIT_USER_CHECK(cmd.positional.size() == 1, "compile takes one FILE.tj, got {}",
                     cmd.positional.size());
  const std::string arch = cmd.get("arch", "sm_90a");
  TILEJIT_USER_CHECK(arch == "sm_80" || arch == "sm_90a" || arch == "sm_86" || arch == "sm_89" ||
                         arch == "sm_90",
                     "--arch must be sm_80, sm_86, sm_89, sm_90 or sm_90a, got '{}'", arch);
  const std::string emit = cmd.get("emit", "cubin");
  const std::string out = cmd.get("out");
  ParsedProgram parsed = load_program(cmd.positional[0]);
  KernelVariantOptions variant = variant_options(cmd);

  if (emit == "ir") {
    write_text(out, lowered_ir(parsed));
    return 0;
  }
  std::vector<ProgramKernel> kernels = program_kernels(parsed, variant);
  if (emit == "cuda" || emit == "ptx") {
    std::string text;
    for (const ProgramKernel& k : kernels) {
      text += fmt::format("// ==== {} ({}) ====\n", k.source.entry, k.variant);
      if (emit == "cuda") {
        text += k.source.source;
      } else {
        CompileRequest req{k.source.file_name, k.spec.source, k.spec.headers, k.spec.options,
                           arch, true};
        text += nvrtc_compile(req).ptx;
      }
    }
    write_text(out, text);
    return 0;
  }
  TILEJIT_USER_CHECK(emit == "cubin", "--emit must be ir, cuda, ptx or cubin, got '{}'", emit);
  for (const ProgramKernel& k : kernels) {
    CompiledKernelReport r = compile_program_kernel(k, arch);
    std::printf("%-44s %-28s %s %7.3f s  %zu bytes  (%s)\n", k.source.entry.c_str(),
                k.variant.c_str(), arch.c_str(), r.kernel->compile_seconds, r.kernel->cubin.size(),
                r.how.c_str());
    if (!out.empty()) {
      std::filesystem::path p = out;
      if (kernels.size() > 1) {
        std::filesystem::create_directories(p);
        p /= k.source.entry + ".cubin";
      }
      write_text(p.string(), std::string(r.kernel->cubin.begin(), r.kernel->cubin.end()));
    }
  }
  return 0;
}

}  // namespace tilejit::cli
