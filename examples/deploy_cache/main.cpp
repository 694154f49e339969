// Shipping precompiled kernels: an ahead-of-time bundle built from a manifest with the library
// call behind `tilejit aot` (runtime/AotBundle.h), then loaded the way a serving process loads
// it, with TILEJIT_CACHE_DIR pointing at the bundle and TILEJIT_OFFLINE=1 (runtime/KernelCache.h):
// every kernel the manifest's programs need comes from the bundle with no compile, and a program
// left out of the bundle is an error naming it. NVRTC needs no GPU, so this runs anywhere.
//
// The manifest is kept tiny (two attention programs, one variant, one arch) and everything lives
// in a temporary directory, removed at exit. The exit code is non-zero if anything compiles
// offline, a kernel fails to load, or the missing program is not refused.
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <variant>
#include <vector>

#include "compiler/Error.h"
#include "runtime/AotBundle.h"
#include "runtime/AotManifest.h"
#include "runtime/BundleIndex.h"
#include "runtime/CacheMaintenance.h"
#include "runtime/KernelCache.h"
#include "runtime/ProgramKernels.h"
#include "runtime/Version.h"

using namespace tilejit;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A fresh directory under the system temp dir, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tilejit-deploy-XXXXXX").string();
    TILEJIT_USER_CHECK(::mkdtemp(pattern.data()) != nullptr, "cannot create a directory {}",
                       pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignore;
    fs::remove_all(path_, ignore);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  TILEJIT_USER_CHECK(out.good(), "cannot write {}", path.string());
}

const std::string kArch = "sm_80";
const KernelVariantOptions kVariant{.dtype = DType::BF16, .head_dim = 64};

// What a deployment's repository would hold: its programs and the manifest listing them.
fs::path write_sources(const fs::path& dir) {
  write_file(dir / "causal.tj", "attention causal {\n  mask = q >= kv\n}\n");
  write_file(dir / "sliding_window.tj",
             "attention sliding_window {\n  param window : i32\n"
             "  mask = q >= kv && q - kv < window\n}\n");
  write_file(
      dir / "prefix_lm.tj",  // not in the manifest: the serving side must refuse it
      "attention prefix_lm {\n  buffer prefix : i32[B]\n  mask = kv < prefix[b] || q >= kv\n}\n");
  write_file(dir / "manifest.txt",
             "# the programs this deployment serves\n"
             "causal.tj          dtype=bf16 head_dim=64\n"
             "sliding_window.tj  dtype=bf16 head_dim=64\n");
  return dir / "manifest.txt";
}

// Step 1, on the build machine: `tilejit aot manifest.txt --arch sm_80 --out bundle`.
bool build_bundle(const std::vector<AotManifestEntry>& manifest, const fs::path& bundle) {
  std::printf("1. AOT bundle for %s (tilejit %s)\n", kArch.c_str(), std::string(version()).c_str());
  AotOptions options{.dir = bundle, .archs = {kArch}, .jobs = 0, .on_progress = {}};
  options.on_progress = [](const AotProgress& p) {
    std::printf("   [%zu/%zu] %s [%s] %s: %s\n", p.done, p.total, p.program.c_str(),
                p.variant.c_str(), p.kernel.c_str(), p.error.empty() ? p.how.c_str() : "FAILED");
    std::fflush(stdout);
  };
  auto t0 = Clock::now();
  AotResult result = build_aot_bundle(manifest, options);
  for (const AotFailure& f : result.failures)
    std::printf("   FAILED: %s [%s] %s %s:\n%s\n", f.program.c_str(), f.variant.c_str(),
                f.arch.c_str(), f.kernel.c_str(), f.message.c_str());
  if (!result.failures.empty() || !result.index_problem.empty()) {
    std::printf("   FAILED: the bundle is incomplete %s\n", result.index_problem.c_str());
    return false;
  }
  size_t bytes = 0, damaged = 0;
  for (const CacheEntryListing& e : list_cache_entries(bundle)) {
    bytes += e.bytes;
    damaged += !e.problem.empty();
  }
  std::printf("   %zu kernels compiled in %.1f s, %zu KiB, %zu entries failing verification\n",
              result.kernels, ms_since(t0) / 1000, bytes / 1024, damaged);
  return damaged == 0;
}

// Step 2, on the serving machine: every kernel the manifest's programs need, from the bundle.
bool load_offline(const std::vector<AotManifestEntry>& manifest) {
  std::printf("\n2. Offline load: TILEJIT_CACHE_DIR=%s TILEJIT_OFFLINE=1\n",
              std::getenv("TILEJIT_CACHE_DIR"));
  bool ok = true;
  for (const AotManifestEntry& entry : manifest) {
    ParsedProgram program = load_program(entry.program_file.string());
    const std::string name = std::visit([](const auto& p) { return p.name; }, program);
    for (const ProgramKernel& kernel : program_kernels(program, kVariant)) {
      auto t0 = Clock::now();
      CompiledKernelReport r = compile_program_kernel(kernel, kArch);
      const double ms = ms_since(t0);
      std::printf("   %-16s %-32s %-10s %6.2f ms  %zu KiB cubin (compiled in %.2f s at AOT time)\n",
                  name.c_str(), kernel.variant.c_str(), r.how.c_str(), ms,
                  r.kernel->cubin.size() / 1024, r.kernel->compile_seconds);
      ok &= r.how != "compiled" && !r.kernel->cubin.empty();
    }
  }
  const KernelCacheStats stats = KernelCache::global().stats();
  std::printf("   compiles: %llu, disk hits: %llu, memory hits: %llu\n",
              (unsigned long long)stats.compiles, (unsigned long long)stats.disk_hits,
              (unsigned long long)stats.memory_hits);
  ok &= stats.compiles == 0;
  if (!ok) std::printf("   FAILED: a kernel was compiled, or not loaded, in offline mode\n");
  return ok;
}

// Step 3: a program left out of the manifest. Its kernels that depend on its mask are not in
// the bundle: each is an OfflineMiss naming the program, the kernel and the arch, so the program
// cannot run. A kernel whose code does not depend on the program (the same key as one in the
// bundle) is served like any other.
bool refuse_missing(const fs::path& program_file, const fs::path& bundle) {
  std::printf("\n3. A program left out of the manifest (%s)\n", program_file.filename().c_str());
  const std::optional<BundleIndex> index = read_bundle_index(bundle);
  TILEJIT_USER_CHECK(index.has_value(), "{} has no bundle index", bundle.string());
  std::set<std::string> bundled;
  for (const BundleKernel& k : index->kernels) bundled.insert(k.key);
  size_t refused = 0, wrong = 0;
  for (const ProgramKernel& kernel :
       program_kernels(load_program(program_file.string()), kVariant)) {
    const bool in_bundle = bundled.count(KernelCache::key(kernel.spec, kArch)) > 0;
    try {
      CompiledKernelReport r = compile_program_kernel(kernel, kArch);
      std::printf("   %-32s %s (the same code is in the bundle)\n", kernel.variant.c_str(),
                  r.how.c_str());
      wrong += !in_bundle || r.how == "compiled";
    } catch (const OfflineMiss& e) {
      const std::string what = e.what();
      // The first message in full; the others say the same for their kernel.
      std::printf("   %-32s refused%s%s\n", kernel.variant.c_str(), refused == 0 ? ": " : "",
                  refused == 0 ? what.c_str() : " (OfflineMiss naming it)");
      const bool names_it = what.find("'prefix_lm'") != std::string::npos &&
                            what.find(kernel.variant) != std::string::npos &&
                            what.find(kArch) != std::string::npos;
      wrong += in_bundle || !names_it;
      ++refused;
    }
  }
  const bool ok = refused > 0 && wrong == 0 && KernelCache::global().stats().compiles == 0;
  if (!ok)
    std::printf("   FAILED: the program was not refused exactly where the bundle lacks it\n");
  return ok;
}

}  // namespace

int main() {
  try {
    TempDir tmp;
    const fs::path sources = tmp.path() / "sources", bundle = tmp.path() / "bundle";
    fs::create_directories(sources);
    const std::vector<AotManifestEntry> manifest = load_aot_manifest(write_sources(sources));

    bool ok = build_bundle(manifest, bundle);
    // The process-wide cache reads these on first use; nothing before this point touched it.
    ::setenv("TILEJIT_CACHE_DIR", bundle.c_str(), 1);
    ::setenv("TILEJIT_OFFLINE", "1", 1);
    ok = ok && load_offline(manifest);
    ok = ok && refuse_missing(sources / "prefix_lm.tj", bundle);
    std::printf("\n%s\n",
                ok ? "bundle loaded offline, nothing compiled, missing program refused" : "FAILED");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "deploy_cache: %s\n", e.what());
    return 1;
  }
}
