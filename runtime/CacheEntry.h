// One kernel-cache entry on disk: its byte format, safe reading, atomic writing and the per-key
// file lock. Used by KernelCache (and by the AOT bundle tooling that reads entries back).
//
// Format (all integers little-endian):
//   "TJKCACHE"                    8-byte magic
//   u32 format version            kCacheFormatVersion
//   u32 header length, header     text lines "name=value": key, arch, program, variant,
//                                 entry_points (comma-separated), nvrtc, tilejit,
//                                 compile_seconds, payload_bytes, payload_sha256
//   u64 payload length, payload   the cubin
//   32-byte sha256 of everything above, so a flipped byte anywhere (metadata included) is caught
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "runtime/KernelCache.h"

namespace tilejit {

std::string encode_cache_entry(const CompiledKernel& kernel);

// Fills `out` (source = DiskHit) and returns "" when `bytes` is a whole, intact entry for `key`
// on `arch` made by this tilejit and NVRTC; otherwise returns what is wrong.
std::string decode_cache_entry(std::string_view bytes, const std::string& key,
                               const std::string& arch, CompiledKernel& out);

// The metadata of an entry whatever it was made for (cache maintenance, bundle tools): the header
// fields ("key", "arch", "program", ...) and "" as `problem` when the whole entry is intact
// (magic, format version, checksums, payload length); otherwise what is wrong.
struct CacheEntryInfo {
  std::map<std::string, std::string> fields;
  uint64_t payload_bytes = 0;
  std::string problem;
};
CacheEntryInfo inspect_cache_entry(std::string_view bytes);

struct CacheEntryRead {
  enum Status {
    Missing,  // no such file
    Loaded,   // `kernel` is valid
    Corrupt,  // truncated, corrupted or made for something else: discard and rebuild
    Unsafe,   // owned by another user, writable by group/others, or not a regular file
    Unreadable,
  };
  Status status = Missing;
  CompiledKernel kernel;
  std::string problem;  // for Corrupt, Unsafe, Unreadable
};

// Reads without a lock: writers only ever rename whole entries into place.
CacheEntryRead read_cache_entry(const std::filesystem::path& file, const std::string& key,
                                const std::string& arch);

// Writes `kernel` to `file` atomically (temp file in the same directory, fsync, rename).
// Returns "" on success, else the error.
std::string write_cache_entry(const std::filesystem::path& file, const CompiledKernel& kernel);

// Creates `dir` and missing parents with mode 0700. Returns "" on success, else the error.
std::string make_private_directories(const std::filesystem::path& dir);

// An exclusive flock on `path` (created 0600 if missing) for the scope of the object. When the
// file cannot be created (read-only directory) the lock is simply not held: callers still work,
// they just may compile the same kernel twice across processes.
class CacheFileLock {
 public:
  explicit CacheFileLock(const std::filesystem::path& path);
  ~CacheFileLock();
  CacheFileLock(const CacheFileLock&) = delete;
  CacheFileLock& operator=(const CacheFileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace tilejit
