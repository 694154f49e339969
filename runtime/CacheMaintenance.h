// Kernel-cache maintenance: list, verify and prune the entries of a cache directory (a bundle,
// $TILEJIT_CACHE_DIR, or the per-user cache with its <version>/<arch>/ subdirectories). Entries
// are read with the cache's own reader (runtime/CacheEntry.h); nothing here takes the cache's
// locks, because readers only ever see whole entries and a removed entry is simply rebuilt.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tilejit {

struct CacheEntryListing {
  std::filesystem::path file;
  std::string key, program, variant, arch, tilejit_version, nvrtc_version;
  uint64_t bytes = 0;
  double age_days = 0;  // since the entry was written
  std::string problem;  // "" when intact: checksums, payload, and a key matching the file name
};

// The per-user cache root: $XDG_CACHE_HOME/tilejit, else ~/.cache/tilejit (empty when neither).
std::filesystem::path default_cache_root();

// Every *.tjk file under `dir` (two levels down at most), oldest first, each read and verified.
std::vector<CacheEntryListing> list_cache_entries(const std::filesystem::path& dir);

// Removes `entries`' files; returns the problems met ("" for each file removed).
std::vector<std::string> remove_cache_entries(const std::vector<CacheEntryListing>& entries);

struct PruneOptions {
  std::optional<uint64_t> max_bytes;      // keep the newest entries totalling at most this
  std::optional<double> older_than_days;  // remove entries written longer ago than this
  bool dry_run = false;
};

struct PruneResult {
  std::vector<CacheEntryListing> removed;
  uint64_t removed_bytes = 0, kept_bytes = 0;
  size_t kept = 0;
};

// Removes the entries older than `older_than_days`, then the oldest until at most `max_bytes`
// remain. Temp files left by an interrupted write and older than a day go too.
PruneResult prune_cache(const std::filesystem::path& dir, const PruneOptions& options);

}  // namespace tilejit
