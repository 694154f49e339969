// Ahead-of-time bundles: every kernel of every (program, variant, arch) of a manifest compiled
// into one kernel-cache directory, with an index (runtime/BundleIndex.h). A deployment points
// TILEJIT_CACHE_DIR at the directory and sets TILEJIT_OFFLINE=1: kernels then load from the
// bundle and a kernel it lacks is an OfflineMiss, never a compile.
//
// The kernels come from program_kernels() (runtime/ProgramKernels.h), the same list the launch
// paths use, and go through a KernelCache on the directory, so a bundle is exactly what the
// cache would have written on first use.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/AotManifest.h"
#include "runtime/BundleIndex.h"

namespace tilejit {

// One finished kernel (or failure), reported as the build goes.
struct AotProgress {
  size_t done = 0, total = 0;
  std::string program, variant, arch, kernel;
  std::string how;    // "compiled", "disk hit", "memory hit"; empty on failure
  std::string error;  // the compile error (program, variant, arch and NVRTC log) on failure
};

struct AotOptions {
  std::filesystem::path dir;
  std::vector<std::string> archs;  // "sm_80", "sm_90a"
  int jobs = 0;                    // compile threads; 0: one per core
  // Called once per kernel, from the worker threads but never two at a time.
  std::function<void(const AotProgress&)> on_progress;
};

struct AotFailure {
  std::string program, variant, arch, kernel;  // kernel is empty when the program itself failed
  std::string message;
};

struct AotResult {
  size_t kernels = 0;   // distinct kernels in the bundle
  size_t compiled = 0;  // of which compiled by this run (the rest were already there)
  std::vector<BundleKernel> index;
  std::vector<AotFailure> failures;  // non-empty: the index was not updated
  std::string index_problem;         // non-empty: the index could not be written
};

// Compiles every kernel of `manifest` for every arch of `options` into options.dir and, when
// all succeeded, adds them to DIR/index.json. A failure (bad program, unsupported variant,
// compile error) is collected, not thrown; the other kernels are still built.
AotResult build_aot_bundle(const std::vector<AotManifestEntry>& manifest,
                           const AotOptions& options);

}  // namespace tilejit
