#include "runtime/CacheMaintenance.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/CacheEntry.h"

namespace tilejit {

namespace fs = std::filesystem;

namespace {

double age_in_days(fs::file_time_type written) {
  auto age = fs::file_time_type::clock::now() - written;
  return std::chrono::duration<double>(age).count() / 86400.0;
}

CacheEntryListing describe(const fs::path& file) {
  CacheEntryListing e;
  e.file = file;
  std::error_code ec;
  e.bytes = fs::file_size(file, ec);
  auto written = fs::last_write_time(file, ec);
  e.age_days = ec ? 0 : age_in_days(written);
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    e.problem = "cannot be read";
    return e;
  }
  std::stringstream bytes;
  bytes << in.rdbuf();
  CacheEntryInfo info = inspect_cache_entry(bytes.str());
  auto field = [&](const char* name) {
    auto it = info.fields.find(name);
    return it == info.fields.end() ? std::string() : it->second;
  };
  e.key = field("key");
  e.program = field("program");
  e.variant = field("variant");
  e.arch = field("arch");
  e.tilejit_version = field("tilejit");
  e.nvrtc_version = field("nvrtc");
  e.problem = info.problem;
  if (e.problem.empty() && e.key != file.stem().string()) {
    e.problem = fmt::format("holds key {} under another name", e.key);
  }
  return e;
}

bool is_stale_temp(const fs::directory_entry& entry) {
  std::string name = entry.path().filename().string();
  if (name.find(".tmp.") == std::string::npos) return false;
  std::error_code ec;
  auto written = entry.last_write_time(ec);
  return !ec && age_in_days(written) > 1.0;
}

template <typename Visit>
void walk(const fs::path& dir, Visit&& visit) {
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it.depth() >= 2) it.disable_recursion_pending();
    if (it->is_regular_file(ec)) visit(*it);
  }
}

}  // namespace

fs::path default_cache_root() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return fs::path(xdg) / "tilejit";
  if (const char* home = std::getenv("HOME"); home && *home)
    return fs::path(home) / ".cache" / "tilejit";
  return {};
}

std::vector<CacheEntryListing> list_cache_entries(const fs::path& dir) {
  std::vector<CacheEntryListing> entries;
  walk(dir, [&](const fs::directory_entry& entry) {
    if (entry.path().extension() == ".tjk") entries.push_back(describe(entry.path()));
  });
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.age_days > b.age_days; });
  return entries;
}

std::vector<std::string> remove_cache_entries(const std::vector<CacheEntryListing>& entries) {
  std::vector<std::string> problems;
  for (const CacheEntryListing& e : entries) {
    std::error_code ec;
    fs::remove(e.file, ec);
    problems.push_back(ec ? fmt::format("cannot remove {}: {}", e.file.string(), ec.message())
                          : std::string());
  }
  return problems;
}

PruneResult prune_cache(const fs::path& dir, const PruneOptions& options) {
  PruneResult result;
  std::vector<CacheEntryListing> entries = list_cache_entries(dir);  // oldest first
  uint64_t total = 0;
  for (const auto& e : entries) total += e.bytes;
  for (const CacheEntryListing& e : entries) {
    bool too_old = options.older_than_days && e.age_days > *options.older_than_days;
    bool too_big = options.max_bytes && total > *options.max_bytes;
    if (too_old || too_big) {
      result.removed.push_back(e);
      result.removed_bytes += e.bytes;
      total -= e.bytes;
    } else {
      ++result.kept;
      result.kept_bytes += e.bytes;
    }
  }
  if (!options.dry_run) {
    remove_cache_entries(result.removed);
    walk(dir, [](const fs::directory_entry& entry) {
      std::error_code ec;
      if (is_stale_temp(entry)) fs::remove(entry.path(), ec);
    });
  }
  return result;
}

}  // namespace tilejit
