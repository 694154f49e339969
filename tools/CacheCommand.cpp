// `tilejit cache ls|verify|prune [--dir DIR] [--fix] [--max-bytes N] [--older-than DAYS]`
//
//   ls      every entry: program, variant, arch, size, age (and what is wrong, if anything)
//   verify  check every entry's checksums; --fix removes the bad ones. Exit 1 when any is bad
//           (and not removed).
//   prune   remove entries older than --older-than DAYS, then the oldest until the rest fit in
//           --max-bytes N (suffixes K, M, G accepted); --dry-run lists without removing.
// DIR defaults to $TILEJIT_CACHE_DIR, else the per-user cache (every version and arch).
#include <cstdio>
#include <cstdlib>

#include "compiler/Error.h"
#include "runtime/CacheMaintenance.h"
#include "tools/CommandLine.h"

namespace tilejit::cli {

namespace {

std::filesystem::path cache_dir(const CommandLine& cmd) {
  if (cmd.has("dir")) return cmd.get("dir");
  if (const char* dir = std::getenv("TILEJIT_CACHE_DIR"); dir && *dir) return dir;
  std::filesystem::path root = default_cache_root();
  TILEJIT_USER_CHECK(!root.empty(), "no cache directory: pass --dir or set TILEJIT_CACHE_DIR");
  return root;
}

std::string human_bytes(uint64_t bytes) {
  if (bytes >= (1u << 20)) return fmt::format("{:.1f} MiB", bytes / 1048576.0);
  if (bytes >= 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{} B", bytes);
}

std::string human_age(double days) {
  if (days >= 1) return fmt::format("{:.1f} d", days);
  if (days * 24 >= 1) return fmt::format("{:.1f} h", days * 24);
  return fmt::format("{:.0f} min", days * 24 * 60);
}

uint64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suffix = end ? end : "";
  double scale = suffix.empty() || suffix == "B" ? 1
                 : suffix == "K"                 ? 1024.0
                 : suffix == "M"                 ? 1048576.0
                 : suffix == "G"                 ? 1073741824.0
                                                 : -1;
  TILEJIT_USER_CHECK(end != s.c_str() && scale > 0 && v >= 0,
                     "--max-bytes needs a size such as 500M, got '{}'", s);
  return static_cast<uint64_t>(v * scale);
}

void print_entry(const CacheEntryListing& e) {
  std::printf("%-24s %-30s %-7s %10s %8s  %s%s\n", e.program.c_str(), e.variant.c_str(),
              e.arch.c_str(), human_bytes(e.bytes).c_str(), human_age(e.age_days).c_str(),
              e.file.filename().string().c_str(),
              e.problem.empty() ? "" : ("  BAD: " + e.problem).c_str());
}

int run_ls(const std::filesystem::path& dir) {
  auto entries = list_cache_entries(dir);
  uint64_t total = 0;
  for (const auto& e : entries) {
    print_entry(e);
    total += e.bytes;
  }
  std::printf("%zu entries, %s in %s\n", entries.size(), human_bytes(total).c_str(),
              dir.string().c_str());
  return 0;
}

int run_verify(const std::filesystem::path& dir, bool fix) {
  std::vector<CacheEntryListing> bad;
  size_t count = 0;
  for (auto& e : list_cache_entries(dir)) {
    ++count;
    if (!e.problem.empty()) bad.push_back(std::move(e));
  }
  for (const auto& e : bad) std::printf("BAD %s: %s\n", e.file.string().c_str(), e.problem.c_str());
  size_t unfixed = bad.size();
  if (fix) {
    auto problems = remove_cache_entries(bad);
    for (size_t i = 0; i < bad.size(); ++i) {
      if (problems[i].empty()) {
        --unfixed;
        std::printf("removed %s\n", bad[i].file.string().c_str());
      } else {
        std::fprintf(stderr, "tilejit: error: %s\n", problems[i].c_str());
      }
    }
  }
  std::printf("%zu entries checked, %zu bad%s in %s\n", count, bad.size(),
              fix ? fmt::format(", {} removed", bad.size() - unfixed).c_str() : "",
              dir.string().c_str());
  return unfixed ? 1 : 0;
}

int run_prune(const CommandLine& cmd, const std::filesystem::path& dir) {
  PruneOptions options;
  if (cmd.has("max-bytes")) options.max_bytes = parse_bytes(cmd.get("max-bytes"));
  if (cmd.has("older-than")) {
    char* end = nullptr;
    std::string s = cmd.get("older-than");
    options.older_than_days = std::strtod(s.c_str(), &end);
    TILEJIT_USER_CHECK(end && *end == '\0' && end != s.c_str() && *options.older_than_days >= 0,
                       "--older-than needs a number of days, got '{}'", s);
  }
  TILEJIT_USER_CHECK(options.max_bytes || options.older_than_days,
                     "cache prune needs --max-bytes N and/or --older-than DAYS");
  options.dry_run = cmd.has("dry-run");
  PruneResult r = prune_cache(dir, options);
  for (const auto& e : r.removed)
    std::printf("%s %s\n", options.dry_run ? "would remove" : "removed", e.file.string().c_str());
  std::printf("%s %zu entries (%s); kept %zu (%s) in %s\n",
              options.dry_run ? "would remove" : "removed", r.removed.size(),
              human_bytes(r.removed_bytes).c_str(), r.kept, human_bytes(r.kept_bytes).c_str(),
              dir.string().c_str());
  return 0;
}

}  // namespace

int run_cache(const CommandLine& cmd) {
  TILEJIT_USER_CHECK(cmd.positional.size() == 1, "cache takes one action: ls, verify or prune");
  const std::string& action = cmd.positional[0];
  std::filesystem::path dir = cache_dir(cmd);
  if (action == "ls") return run_ls(dir);
  if (action == "verify") return run_verify(dir, cmd.has("fix"));
  if (action == "prune") return run_prune(cmd, dir);
  user_error("unknown cache action '{}': ls, verify or prune", action);
}

}  // namespace tilejit::cli
