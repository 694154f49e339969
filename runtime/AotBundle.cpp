#include "runtime/AotBundle.h"

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "compiler/Printer.h"
#include "runtime/KernelCache.h"

namespace tilejit {

namespace {

struct AotTask {
  std::string program, variant, arch;
  BundleKernel index_entry;
  KernelSpec spec;
};

std::string program_name(const ParsedProgram& p) {
  return std::visit([](const auto& program) { return program.name; }, p);
}

std::string identity_hash(const ParsedProgram& p) {
  return std::visit([](const auto& program) { return program_hash(program); }, p);
}

// Every (program, variant, arch, kernel) of the manifest; a program that cannot be loaded or a
// variant it does not support is a failure. Kernels with equal keys are built once.
std::vector<AotTask> plan_tasks(const std::vector<AotManifestEntry>& manifest,
                                const AotOptions& options, std::vector<AotFailure>& failures) {
  std::vector<AotTask> tasks;
  std::set<std::string> seen;  // key + labels: one index line per (program, variant, kernel)
  for (const AotManifestEntry& entry : manifest) {
    ParsedProgram program;
    try {
      program = load_program(entry.program_file.string());
    } catch (const Error& e) {
      failures.push_back({entry.program_file.string(), "", "", "", e.what()});
      continue;
    }
    std::string name = program_name(program), hash = identity_hash(program);
    for (DType dtype : entry.dtypes) {
      for (int head_dim : entry.head_dims) {
        KernelVariantOptions variant{.dtype = dtype, .head_dim = head_dim};
        std::string label = variant_label(program, variant);
        std::vector<ProgramKernel> kernels;
        try {
          kernels = program_kernels(program, variant);
        } catch (const Error& e) {
          for (const std::string& arch : options.archs)
            failures.push_back({name, label, arch, "", e.what()});
          continue;
        }
        for (const std::string& arch : options.archs) {
          for (const ProgramKernel& k : kernels) {
            std::string key = KernelCache::key(k.spec, arch);
            if (!seen.insert(key + '\n' + hash + '\n' + label + '\n' + k.variant).second) continue;
            BundleKernel index{name, hash, label, k.variant, arch, key, k.spec.entry_points};
            tasks.push_back({name, label, arch, std::move(index), k.spec});
          }
        }
      }
    }
  }
  return tasks;
}

}  // namespace

AotResult build_aot_bundle(const std::vector<AotManifestEntry>& manifest,
                           const AotOptions& options) {
  TILEJIT_USER_CHECK(!options.dir.empty(), "aot: no output directory given");
  TILEJIT_USER_CHECK(!options.archs.empty(), "aot: no target architecture given");
  AotResult result;
  std::vector<AotTask> tasks = plan_tasks(manifest, options, result.failures);

  KernelCacheOptions cache_options;
  cache_options.dir = options.dir;
  cache_options.use_disk = true;
  cache_options.offline = false;
  cache_options.memory_capacity = 16;  // a bundle is written to disk, not kept
  KernelCache cache(cache_options);

  int jobs = options.jobs > 0 ? options.jobs
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  jobs = std::max(1, std::min<int>(jobs, static_cast<int>(tasks.size())));
  std::atomic<size_t> next{0};
  std::mutex mutex;  // guards result and the progress callback
  size_t done = 0;
  std::set<std::string> keys;

  auto work = [&] {
    for (size_t i = next++; i < tasks.size(); i = next++) {
      const AotTask& t = tasks[i];
      AotProgress progress{0,      tasks.size(),         t.program, t.variant,
                           t.arch, t.index_entry.kernel, "",        ""};
      CompiledKernel::Source how = CompiledKernel::Compiled;
      try {
        cache.get(t.spec, t.arch, &how);
        progress.how = how == CompiledKernel::Compiled  ? "compiled"
                       : how == CompiledKernel::DiskHit ? "disk hit"
                                                        : "memory hit";
      } catch (const Error& e) {
        progress.error = e.what();
      }
      std::lock_guard lock(mutex);
      progress.done = ++done;
      if (progress.error.empty()) {
        result.index.push_back(t.index_entry);
        if (keys.insert(t.index_entry.key).second && how == CompiledKernel::Compiled)
          ++result.compiled;
      } else {
        result.failures.push_back(
            {t.program, t.variant, t.arch, t.index_entry.kernel, progress.error});
      }
      if (options.on_progress) options.on_progress(progress);
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < jobs; ++j) threads.emplace_back(work);
  if (!tasks.empty()) work();
  for (std::thread& t : threads) t.join();

  result.kernels = keys.size();
  if (result.failures.empty())
    result.index_problem = update_bundle_index(options.dir, result.index);
  return result;
}

}  // namespace tilejit
