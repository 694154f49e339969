#include "runtime/KernelCache.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <list>
#include <mutex>
#include <set>
#include <unordered_map>

#include "compiler/Error.h"
#include "compiler/Sha256.h"
#include "runtime/BundleIndex.h"
#include "runtime/CacheEntry.h"
#include "runtime/Nvrtc.h"
#include "runtime/Version.h"

namespace tilejit {

namespace {

const std::string& cached_nvrtc_version() {
  static const std::string v = nvrtc_version();
  return v;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string_view(v) != "0";
}

void warn(const std::string& message) {
  std::fprintf(stderr, "tilejit: warning: %s\n", message.c_str());
}

}  // namespace

KernelCacheOptions KernelCacheOptions::from_environment() {
  KernelCacheOptions options;
  if (const char* dir = std::getenv("TILEJIT_CACHE_DIR"); dir && *dir) options.dir = dir;
  options.use_disk = !env_flag("TILEJIT_CACHE_DISABLE");
  options.offline = env_flag("TILEJIT_OFFLINE");
  return options;
}

struct KernelCache::State {
  struct MemoryEntry {
    std::shared_ptr<const CompiledKernel> kernel;
    std::list<std::string>::iterator lru_position;
  };

  std::mutex mutex;            // guards everything below
  std::list<std::string> lru;  // most recently used first
  std::unordered_map<std::string, MemoryEntry> memory;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>>
      in_flight;
  std::set<std::filesystem::path> unwritable_dirs;  // warned about once each
  std::filesystem::path default_root;               // resolved once; empty when there is none
  std::once_flag bundle_checked;  // offline: the bundle index's versions, checked on first use

  std::atomic<uint64_t> compiles{0}, memory_hits{0}, disk_hits{0}, disk_rejected{0},
      disk_write_failures{0};
};

KernelCache::KernelCache(KernelCacheOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {
  if (options_.use_disk && options_.dir.empty()) {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (xdg && *xdg) {
      state_->default_root = std::filesystem::path(xdg) / "tilejit" / std::string(version());
    } else if (home && *home) {
      state_->default_root =
          std::filesystem::path(home) / ".cache" / "tilejit" / std::string(version());
    } else {
      warn("no TILEJIT_CACHE_DIR, XDG_CACHE_HOME or HOME: the kernel cache is memory only");
      options_.use_disk = false;
    }
  }
}

KernelCache::~KernelCache() = default;

KernelCache& KernelCache::global() {
  static KernelCache* cache = new KernelCache();  // never destroyed: used until process exit
  return *cache;
}

std::string KernelCache::key(const KernelSpec& spec, const std::string& arch) {
  // Every list is sorted where order cannot change the binary and preceded by its length, and
  // every string is length-prefixed, so distinct inputs never hash the same bytes.
  auto headers = spec.headers;
  std::sort(headers.begin(), headers.end());
  auto options = spec.options;
  std::sort(options.begin(), options.end());
  auto entries = spec.entry_points;
  std::sort(entries.begin(), entries.end());

  Sha256 h;
  h.field("tilejit kernel");
  h.field(spec.source);
  h.field(std::to_string(headers.size()));
  for (const auto& [name, content] : headers) h.field(name).field(content);
  h.field(std::to_string(options.size()));
  for (const auto& o : options) h.field(o);
  h.field(std::to_string(entries.size()));
  for (const auto& e : entries) h.field(e);
  h.field(arch);
  h.field(cached_nvrtc_version());
  h.field(version());
  h.field(std::to_string(kCacheFormatVersion));
  return h.hex_digest();
}

std::filesystem::path KernelCache::directory(const std::string& arch) const {
  if (!options_.use_disk) return {};
  if (!options_.dir.empty()) return options_.dir;
  return state_->default_root / arch;
}

std::filesystem::path KernelCache::entry_path(const std::string& key,
                                              const std::string& arch) const {
  std::filesystem::path dir = directory(arch);
  return dir.empty() ? dir : dir / (key + ".tjk");
}

KernelCacheStats KernelCache::stats() const {
  return {state_->compiles, state_->memory_hits, state_->disk_hits, state_->disk_rejected,
          state_->disk_write_failures};
}

void KernelCache::clear_memory() {
  std::lock_guard lock(state_->mutex);
  state_->memory.clear();
  state_->lru.clear();
}

namespace {

// One lookup past the memory cache: disk, then (unless offline) NVRTC, writing the result back.
class DiskLookup {
 public:
  DiskLookup(const KernelSpec& spec, const std::string& arch, const std::string& key,
             const std::filesystem::path& dir, bool writable, bool offline)
      : spec_(spec), arch_(arch), key_(key), dir_(dir), writable_(writable), offline_(offline) {}

  // Filled in by run(): what went wrong with the disk, for the caller to count and report.
  int rejected = 0;
  std::string write_problem;  // non-empty when the entry could not be written
  bool compiled = false;

  std::shared_ptr<const CompiledKernel> run() {
    std::filesystem::path file;
    bool may_write = !dir_.empty() && writable_;
    if (!dir_.empty()) {
      file = dir_ / (key_ + ".tjk");
      if (auto hit = read(file, may_write)) return hit;
    }
    if (offline_) {
      throw OfflineMiss(fmt::format(
          "kernel cache miss in offline mode (TILEJIT_OFFLINE=1): program '{}', variant '{}', "
          "arch {} (key {}) is not in {}; compile it ahead of time or unset TILEJIT_OFFLINE",
          spec_.program_name, spec_.variant, arch_, key_,
          dir_.empty() ? std::string("the memory cache (disk cache off)") : dir_.string()));
    }
    if (!may_write) return compile();

    std::string dir_problem = make_private_directories(dir_);
    if (!dir_problem.empty()) {
      write_problem = dir_problem;
      return compile();
    }
    // Another process may be compiling the same key: wait for it, then look again.
    CacheFileLock lock(dir_ / (key_ + ".lock"));
    if (lock.held()) {
      if (auto hit = read(file, may_write)) return hit;
      if (!may_write) return compile();
    }
    auto kernel = compile();
    write_problem = write_cache_entry(file, *kernel);
    return kernel;
  }

 private:
  // A valid entry, or nullptr after discarding what is there. Clears `may_write` when the entry
  // must be left alone (unsafe: someone else's file).
  std::shared_ptr<const CompiledKernel> read(const std::filesystem::path& file, bool& may_write) {
    CacheEntryRead entry = read_cache_entry(file, key_, arch_);
    switch (entry.status) {
      case CacheEntryRead::Missing: return nullptr;
      case CacheEntryRead::Loaded: {
        auto kernel = std::make_shared<CompiledKernel>(std::move(entry.kernel));
        // Names are not part of the key: report the ones the caller uses now.
        kernel->program_name = spec_.program_name;
        kernel->variant = spec_.variant;
        if (same_entry_points(kernel->entry_points)) return kernel;
        entry.problem = "entry points differ";
        [[fallthrough]];
      }
      case CacheEntryRead::Corrupt:
        ++rejected;
        warn(fmt::format("discarding kernel cache entry {}: {}; rebuilding", file.string(),
                         entry.problem));
        std::filesystem::remove(file, ignore_);
        return nullptr;
      case CacheEntryRead::Unsafe:
        ++rejected;
        may_write = false;
        warn(fmt::format("refusing kernel cache entry {}: it {}; compiling {} in memory instead",
                         file.string(), entry.problem, spec_.program_name));
        return nullptr;
      case CacheEntryRead::Unreadable:
        ++rejected;
        warn(fmt::format("cannot read kernel cache entry {}: {}", file.string(), entry.problem));
        return nullptr;
    }
    return nullptr;
  }

  // Entry points are in the key, so a mismatch means the entry is damaged.
  bool same_entry_points(std::vector<std::string> stored) const {
    std::vector<std::string> wanted = spec_.entry_points;
    std::sort(stored.begin(), stored.end());
    std::sort(wanted.begin(), wanted.end());
    return stored == wanted;
  }

  std::shared_ptr<const CompiledKernel> compile() {
    CompileRequest request{.program_name = spec_.program_name,
                           .source = spec_.source,
                           .headers = spec_.headers,
                           .options = spec_.options,
                           .arch = arch_};
    CompileResult result = nvrtc_compile(request);
    compiled = true;
    auto kernel = std::make_shared<CompiledKernel>();
    kernel->key = key_;
    kernel->arch = arch_;
    kernel->cubin = std::move(result.cubin);
    kernel->entry_points = spec_.entry_points;
    kernel->program_name = spec_.program_name;
    kernel->variant = spec_.variant;
    kernel->compile_seconds = result.seconds;
    kernel->source = CompiledKernel::Compiled;
    return kernel;
  }

  const KernelSpec& spec_;
  const std::string& arch_;
  const std::string& key_;
  std::filesystem::path dir_;
  bool writable_;  // false once writing to dir_ has failed: entries are still read
  bool offline_;
  std::error_code ignore_;
};

}  // namespace

std::shared_ptr<const CompiledKernel> KernelCache::get(const KernelSpec& spec,
                                                       const std::string& arch,
                                                       CompiledKernel::Source* how) {
  TILEJIT_USER_CHECK(!arch.empty(), "kernel {} ({}): no target architecture given",
                     spec.program_name, spec.variant);
  State& s = *state_;
  if (options_.offline && options_.use_disk && !options_.dir.empty()) {
    // A bundle from another tilejit or NVRTC can serve nothing: say so instead of missing on
    // every kernel. Not retried once passed; a throw leaves it to be checked again.
    std::call_once(s.bundle_checked, [&] { check_bundle_versions(options_.dir); });
  }
  const std::string k = key(spec, arch);

  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  {
    std::unique_lock lock(s.mutex);
    if (auto it = s.memory.find(k); it != s.memory.end()) {
      s.lru.splice(s.lru.begin(), s.lru, it->second.lru_position);
      ++s.memory_hits;
      if (how) *how = CompiledKernel::MemoryHit;
      return it->second.kernel;
    }
    if (auto it = s.in_flight.find(k); it != s.in_flight.end()) {
      // Another thread is building this key: share its result (or its exception).
      auto future = it->second;
      lock.unlock();
      auto kernel = future.get();
      ++s.memory_hits;
      if (how) *how = CompiledKernel::MemoryHit;
      return kernel;
    }
    s.in_flight.emplace(k, promise.get_future().share());
  }

  std::filesystem::path dir = directory(arch);
  bool writable;
  {
    std::lock_guard lock(s.mutex);
    writable = !s.unwritable_dirs.count(dir);  // a directory that failed once is not retried
  }
  DiskLookup lookup(spec, arch, k, dir, writable, options_.offline);
  std::shared_ptr<const CompiledKernel> kernel;
  try {
    kernel = lookup.run();
  } catch (...) {
    s.disk_rejected += lookup.rejected;
    std::lock_guard lock(s.mutex);
    promise.set_exception(std::current_exception());
    s.in_flight.erase(k);
    throw;
  }
  s.disk_rejected += lookup.rejected;
  if (lookup.compiled) ++s.compiles;
  if (!lookup.compiled) ++s.disk_hits;

  std::lock_guard lock(s.mutex);
  if (!lookup.write_problem.empty()) {
    ++s.disk_write_failures;
    if (s.unwritable_dirs.insert(dir).second) {
      warn(fmt::format("kernel cache directory {} is not writable ({}); caching in memory only",
                       dir.string(), lookup.write_problem));
    }
  }
  if (options_.memory_capacity > 0) {
    s.lru.push_front(k);
    s.memory[k] = {kernel, s.lru.begin()};
    while (s.memory.size() > options_.memory_capacity) {
      s.memory.erase(s.lru.back());
      s.lru.pop_back();
    }
  }
  promise.set_value(kernel);
  s.in_flight.erase(k);
  if (how) *how = kernel->source;
  return kernel;
}

}  // namespace tilejit
