// The kernel cache: compiled cubins by content, in memory (LRU) and on disk.
//
// The key is a sha256 over every input that can change the binary (length-prefixed, headers and
// options sorted): source, headers, options, entry points, arch, NVRTC version, tilejit version
// and the cache-format version. Nothing else identifies a kernel, so two equal specs share one
// binary whatever they are called.
//
// Disk: $TILEJIT_CACHE_DIR, else $XDG_CACHE_HOME/tilejit/<version>/<arch>/, else
// ~/.cache/tilejit/<version>/<arch>/. Reads take no lock; a miss takes a per-key file lock,
// re-checks, compiles and writes a temp file that is fsync'ed and renamed into place, so readers
// only ever see whole entries. Each entry carries a checksum and the kernel's metadata; a corrupt,
// truncated or mismatching entry is discarded and rebuilt. An entry that another user owns, or
// that group/others may write, is refused (it could have been planted) and rebuilt in memory.
// A directory that cannot be written degrades to memory only, with one warning.
//
// TILEJIT_OFFLINE=1 (deployment): a miss throws OfflineMiss instead of compiling. When the
// directory is an AOT bundle (it has an index.json, runtime/BundleIndex.h) made by another
// tilejit, NVRTC or cache format, the first lookup throws BundleVersionMismatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tilejit {

struct KernelSpec {
  std::string program_name;  // for messages and metadata only: not part of the key
  std::string source;
  std::vector<std::pair<std::string, std::string>> headers;  // include name -> content
  std::vector<std::string> options;
  std::vector<std::string> entry_points;  // extern "C" kernel names
  std::string variant;  // human-readable, not part of the key: "attention_fwd bf16 d128"
};

struct CompiledKernel {
  enum Source { Compiled, MemoryHit, DiskHit };

  std::string key;  // sha256 hex
  std::string arch;
  std::vector<char> cubin;
  std::vector<std::string> entry_points;
  std::string program_name, variant;
  double compile_seconds = 0;  // of the original compile, also for hits
  Source source = Compiled;    // how it was first obtained (compiled, or read from disk)
};

struct KernelCacheOptions {
  // Empty: resolved from the environment as described above (the arch subdirectory is appended
  // per request). Non-empty: used as is, entries of all archs side by side.
  std::filesystem::path dir;
  bool use_disk = true;
  size_t memory_capacity = 256;  // kernels kept in memory (LRU)
  bool offline = false;

  // dir empty, offline from TILEJIT_OFFLINE, TILEJIT_CACHE_DISABLE=1 turns the disk off.
  static KernelCacheOptions from_environment();
};

struct KernelCacheStats {
  uint64_t compiles = 0;
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t disk_rejected = 0;  // corrupt, truncated, mismatching or unsafe entries discarded
  uint64_t disk_write_failures = 0;
};

class KernelCache {
 public:
  explicit KernelCache(KernelCacheOptions options = KernelCacheOptions::from_environment());
  ~KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The process-wide cache, configured from the environment on first use.
  static KernelCache& global();

  // The compiled kernel for `spec` on `arch` ("sm_80", "sm_90a"), compiling at most once per key
  // across threads (a shared in-flight compile) and processes (a file lock). Throws CompileError,
  // OfflineMiss. `how`, when given, receives where this call found the kernel (the returned
  // object's `source` says how it was first obtained: it is shared by every later hit).
  std::shared_ptr<const CompiledKernel> get(const KernelSpec& spec, const std::string& arch,
                                            CompiledKernel::Source* how = nullptr);

  // The cache key of `spec` on `arch` (sha256 hex).
  static std::string key(const KernelSpec& spec, const std::string& arch);

  // The directory holding `arch`'s entries, or empty when the disk is off.
  std::filesystem::path directory(const std::string& arch) const;
  // The entry file of `key` on `arch` (whether or not it exists).
  std::filesystem::path entry_path(const std::string& key, const std::string& arch) const;

  KernelCacheStats stats() const;
  void clear_memory();
  const KernelCacheOptions& options() const { return options_; }

 private:
  struct State;
  KernelCacheOptions options_;
  std::unique_ptr<State> state_;
};

}  // namespace tilejit
