// `tilejit aot MANIFEST --arch sm_80,sm_90a --out DIR [--jobs N] [--plain]`
//
// Compiles every kernel of every (program, variant, arch) of the manifest (runtime/AotManifest.h)
// into DIR, a kernel-cache directory, and adds them to DIR/index.json. Progress is a bar on a
// terminal and one line per kernel otherwise (logs, or --plain). Exit 1 when anything failed:
// each failure names its program, variant and arch and shows the error; the index is then left
// as it was.
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "runtime/AotBundle.h"
#include "runtime/Nvrtc.h"
#include "runtime/Version.h"
#include "tools/CommandLine.h"

namespace tilejit::cli {

namespace {

std::vector<std::string> parse_archs(const std::string& list) {
  std::vector<std::string> archs;
  std::istringstream in(list);
  for (std::string arch; std::getline(in, arch, ',');) {
    TILEJIT_USER_CHECK(arch == "sm_80" || arch == "sm_86" || arch == "sm_89" || arch == "sm_90" ||
                           arch == "sm_90a",
                       "--arch takes sm_80, sm_86, sm_89, sm_90 or sm_90a (comma-separated), got "
                       "'{}'",
                       arch);
    archs.push_back(arch);
  }
  TILEJIT_USER_CHECK(!archs.empty(), "--arch needs at least one architecture");
  return archs;
}

std::string describe(const AotProgress& p) {
  return fmt::format("{} [{}] {} {}", p.program, p.variant, p.arch, p.kernel);
}

// A one-line bar redrawn in place (terminal) or one line per kernel (anything else).
void report(const AotProgress& p, bool terminal) {
  if (!terminal) {
    std::printf("[%zu/%zu] %s: %s\n", p.done, p.total, describe(p).c_str(),
                p.error.empty() ? p.how.c_str() : "FAILED");
    std::fflush(stdout);
    return;
  }
  constexpr size_t kWidth = 30;
  size_t filled = p.total ? kWidth * p.done / p.total : kWidth;
  std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  std::string what = describe(p);
  if (what.size() > 60) what = what.substr(0, 57) + "...";
  std::fprintf(stderr, "\r\033[K[%s] %zu/%zu %s", bar.c_str(), p.done, p.total, what.c_str());
  if (!p.error.empty()) std::fprintf(stderr, "\n  FAILED: %s\n", describe(p).c_str());
  if (p.done == p.total) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace

int run_aot(const CommandLine& cmd) {
  TILEJIT_USER_CHECK(cmd.positional.size() == 1, "aot takes one MANIFEST, got {}",
                     cmd.positional.size());
  TILEJIT_USER_CHECK(cmd.has("out"), "aot needs --out DIR");
  AotOptions options;
  options.dir = cmd.get("out");
  options.archs = parse_archs(cmd.get("arch", "sm_80,sm_90a"));
  options.jobs = static_cast<int>(cmd.get_int("jobs", 0));
  TILEJIT_USER_CHECK(options.jobs >= 0, "--jobs must be positive");
  bool terminal = ::isatty(STDERR_FILENO) && !cmd.has("plain");
  options.on_progress = [terminal](const AotProgress& p) { report(p, terminal); };

  std::vector<AotManifestEntry> manifest = load_aot_manifest(cmd.positional[0]);
  AotResult result = build_aot_bundle(manifest, options);

  for (const AotFailure& f : result.failures) {
    std::string where = f.program;
    if (!f.variant.empty()) where += fmt::format(" [{}]", f.variant);
    if (!f.arch.empty()) where += " " + f.arch;
    if (!f.kernel.empty()) where += " " + f.kernel;
    std::fprintf(stderr, "tilejit: error: aot: %s failed:\n%s\n\n", where.c_str(),
                 f.message.c_str());
  }
  if (!result.failures.empty()) {
    std::fprintf(stderr, "tilejit: aot: %zu failure(s); %s/index.json not updated\n",
                 result.failures.size(), options.dir.string().c_str());
    return 1;
  }
  if (!result.index_problem.empty()) {
    std::fprintf(stderr, "tilejit: error: aot: %s\n", result.index_problem.c_str());
    return 1;
  }
  std::printf(
      "%zu kernels (%zu compiled, %zu already there) in %s for %zu programs; tilejit %s, "
      "NVRTC %s\n",
      result.kernels, result.compiled, result.kernels - result.compiled,
      options.dir.string().c_str(), manifest.size(), std::string(version()).c_str(),
      nvrtc_version().c_str());
  return 0;
}

}  // namespace tilejit::cli
