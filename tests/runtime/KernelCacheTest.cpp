// Kernel cache behaviour: memory and disk hits, LRU, offline mode, concurrent threads and
// processes sharing one directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "compiler/Error.h"
#include "runtime/CacheEntry.h"
#include "runtime/KernelCache.h"
#include "tests/runtime/RuntimeTestSupport.h"

extern char** environ;

namespace tilejit {
namespace {

using test::disk_options;
using test::TempDir;
using test::tiny_kernel_spec;

int count_files(const std::filesystem::path& dir, const std::string& needle) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().find(needle) != std::string::npos) ++n;
  }
  return n;
}

TEST(KernelCache, MemoryHitReturnsTheSameKernel) {
  KernelCacheOptions options;
  options.use_disk = false;
  KernelCache cache(options);
  KernelSpec spec = tiny_kernel_spec("memory hit");
  CompiledKernel::Source how{};
  auto first = cache.get(spec, "sm_80", &how);
  EXPECT_EQ(how, CompiledKernel::Compiled);
  EXPECT_FALSE(first->cubin.empty());
  EXPECT_EQ(first->key, KernelCache::key(spec, "sm_80"));
  EXPECT_EQ(first->entry_points, spec.entry_points);
  EXPECT_EQ(first->variant, "tiny_scale f32");
  auto second = cache.get(spec, "sm_80", &how);
  EXPECT_EQ(how, CompiledKernel::MemoryHit);
  EXPECT_EQ(first.get(), second.get());
  KernelCacheStats stats = cache.stats();
  EXPECT_EQ(stats.compiles, 1u);
  EXPECT_EQ(stats.memory_hits, 1u);
  EXPECT_EQ(stats.disk_hits, 0u);
}

TEST(KernelCache, DiskHitInASecondCacheAndPrivateDirectories) {
  TempDir tmp;
  // The default location: $XDG_CACHE_HOME/tilejit/<version>/<arch>/, created 0700.
  const char* saved = std::getenv("XDG_CACHE_HOME");
  std::string saved_value = saved ? saved : "";
  ::setenv("XDG_CACHE_HOME", (tmp.path() / "xdg").c_str(), 1);
  KernelCacheOptions options;
  options.dir.clear();
  KernelCache first(options);
  KernelCache second(options);
  if (saved) {
    ::setenv("XDG_CACHE_HOME", saved_value.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
  std::filesystem::path dir = first.directory("sm_80");
  EXPECT_EQ(dir, tmp.path() / "xdg" / "tilejit" / "0.1.0" / "sm_80");

  KernelSpec spec = tiny_kernel_spec("disk hit");
  auto compiled = first.get(spec, "sm_80");
  EXPECT_EQ(compiled->source, CompiledKernel::Compiled);
  EXPECT_TRUE(std::filesystem::exists(first.entry_path(compiled->key, "sm_80")));
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(first.entry_path(compiled->key, "sm_80").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u) << "entries are private";

  spec.program_name = "renamed.cu";  // names are not identity: still the same entry
  CompiledKernel::Source how{};
  auto loaded = second.get(spec, "sm_80", &how);
  EXPECT_EQ(how, CompiledKernel::DiskHit);
  EXPECT_EQ(loaded->cubin, compiled->cubin);
  EXPECT_EQ(loaded->entry_points, compiled->entry_points);
  EXPECT_EQ(loaded->program_name, "renamed.cu");
  EXPECT_NEAR(loaded->compile_seconds, compiled->compile_seconds, 1e-5);  // stored as text
  EXPECT_EQ(second.stats().compiles, 0u);
  EXPECT_EQ(second.stats().disk_hits, 1u);
  EXPECT_EQ(count_files(dir, ".tmp"), 0);
}

TEST(KernelCache, LeastRecentlyUsedKernelLeavesMemory) {
  TempDir tmp;
  KernelCacheOptions options = disk_options(tmp.path());
  options.memory_capacity = 1;
  KernelCache cache(options);
  KernelSpec a = tiny_kernel_spec("lru a"), b = tiny_kernel_spec("lru b");
  CompiledKernel::Source how{};
  cache.get(a, "sm_80", &how);
  cache.get(b, "sm_80", &how);  // evicts a
  cache.get(a, "sm_80", &how);
  EXPECT_EQ(how, CompiledKernel::DiskHit);
  cache.get(a, "sm_80", &how);
  EXPECT_EQ(how, CompiledKernel::MemoryHit);
  EXPECT_EQ(cache.stats().compiles, 2u);
}

TEST(KernelCache, OfflineMissNamesProgramVariantAndArch) {
  TempDir tmp;
  KernelCache offline(disk_options(tmp.path(), /*offline=*/true));
  KernelSpec spec = tiny_kernel_spec("offline");
  spec.variant = "attention_fwd bf16 d128";
  try {
    offline.get(spec, "sm_90a");
    FAIL() << "expected OfflineMiss";
  } catch (const OfflineMiss& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("tiny_scale.cu"), std::string::npos) << what;
    EXPECT_NE(what.find("attention_fwd bf16 d128"), std::string::npos) << what;
    EXPECT_NE(what.find("sm_90a"), std::string::npos) << what;
  }
  EXPECT_EQ(offline.stats().compiles, 0u);

  // Once an online cache has built the entry, the offline one loads it.
  KernelCache online(disk_options(tmp.path()));
  online.get(spec, "sm_90a");
  CompiledKernel::Source how{};
  offline.get(spec, "sm_90a", &how);
  EXPECT_EQ(how, CompiledKernel::DiskHit);
  EXPECT_EQ(offline.stats().compiles, 0u);
}

TEST(KernelCache, DirectoryFromEnvironment) {
  ::setenv("TILEJIT_CACHE_DIR", "/some/bundle", 1);
  KernelCacheOptions options = KernelCacheOptions::from_environment();
  ::unsetenv("TILEJIT_CACHE_DIR");
  EXPECT_EQ(options.dir, "/some/bundle");
  KernelCache cache(options);
  EXPECT_EQ(cache.directory("sm_80"), "/some/bundle") << "used as is, archs side by side";
  EXPECT_EQ(cache.entry_path("abc", "sm_80"), "/some/bundle/abc.tjk");
  ::setenv("TILEJIT_CACHE_DISABLE", "1", 1);
  EXPECT_FALSE(KernelCacheOptions::from_environment().use_disk);
  ::unsetenv("TILEJIT_CACHE_DISABLE");
}

TEST(KernelCache, OfflineFromEnvironment) {
  ::setenv("TILEJIT_OFFLINE", "1", 1);
  EXPECT_TRUE(KernelCacheOptions::from_environment().offline);
  ::setenv("TILEJIT_OFFLINE", "0", 1);
  EXPECT_FALSE(KernelCacheOptions::from_environment().offline);
  ::unsetenv("TILEJIT_OFFLINE");
  EXPECT_FALSE(KernelCacheOptions::from_environment().offline);
}

TEST(KernelCache, CompileErrorsPropagateToEveryWaiter) {
  KernelCacheOptions options;
  options.use_disk = false;
  KernelCache cache(options);
  KernelSpec spec = tiny_kernel_spec("error");
  spec.source += "this is not C++\n";
  EXPECT_THROW(cache.get(spec, "sm_80"), Error);
  EXPECT_THROW(cache.get(spec, "sm_80"), Error);  // not cached as a success
}

TEST(KernelCache, ConcurrentThreadsCompileOnce) {
  TempDir tmp;
  KernelCache cache(disk_options(tmp.path()));
  KernelSpec spec = tiny_kernel_spec("threads");
  std::vector<std::shared_ptr<const CompiledKernel>> results(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] { results[i] = cache.get(spec, "sm_80"); });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) EXPECT_EQ(r.get(), results[0].get());
  EXPECT_EQ(cache.stats().compiles, 1u);
  EXPECT_EQ(cache.stats().memory_hits, 7u);
  EXPECT_EQ(count_files(tmp.path(), ".tjk"), 1);
}

// Run in child processes by ConcurrentProcessesLeaveOneEntry (disabled when run directly).
TEST(KernelCacheChild, DISABLED_CompileIntoSharedDir) {
  const char* dir = std::getenv("TILEJIT_TEST_SHARED_DIR");
  const char* report = std::getenv("TILEJIT_TEST_REPORT");
  ASSERT_TRUE(dir && report);
  KernelCache cache(disk_options(dir));
  auto kernel = cache.get(tiny_kernel_spec("processes"), "sm_80");
  std::ofstream(report) << cache.stats().compiles << "\n";
}

TEST(KernelCache, ConcurrentProcessesLeaveOneEntry) {
  TempDir tmp;
  std::filesystem::path shared = tmp.path() / "shared";
  std::vector<pid_t> children;
  for (int i = 0; i < 4; ++i) {
    std::vector<std::string> env_strings = {
        "TILEJIT_TEST_SHARED_DIR=" + shared.string(),
        fmt::format("TILEJIT_TEST_REPORT={}/report{}", tmp.path().string(), i)};
    std::vector<char*> env;
    for (auto& s : env_strings) env.push_back(s.data());
    for (char** e = environ; *e; ++e) env.push_back(*e);
    env.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    std::string filter = "--gtest_filter=KernelCacheChild.*";
    std::string disabled = "--gtest_also_run_disabled_tests";
    char* argv[] = {exe.data(), filter.data(), disabled.data(), nullptr};
    posix_spawn_file_actions_t quiet;  // the children's gtest banners would clutter the log
    ::posix_spawn_file_actions_init(&quiet);
    ::posix_spawn_file_actions_addopen(&quiet, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    int spawned = ::posix_spawn(&pid, exe.c_str(), &quiet, nullptr, argv, env.data());
    ::posix_spawn_file_actions_destroy(&quiet);
    ASSERT_EQ(spawned, 0);
    children.push_back(pid);
  }
  int total_compiles = 0;
  for (size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    ASSERT_EQ(::waitpid(children[i], &status, 0), children[i]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child " << i;
    int compiles = -1;
    std::ifstream(tmp.path() / fmt::format("report{}", i)) >> compiles;
    EXPECT_GE(compiles, 0) << "child " << i << " wrote no report";
    total_compiles += compiles;
  }
  EXPECT_EQ(total_compiles, 1) << "the file lock lets exactly one process compile";
  EXPECT_EQ(count_files(shared, ".tjk"), 1);
  EXPECT_EQ(count_files(shared, ".tmp"), 0);

  KernelCache reader(disk_options(shared));
  CompiledKernel::Source how{};
  reader.get(tiny_kernel_spec("processes"), "sm_80", &how);
  EXPECT_EQ(how, CompiledKernel::DiskHit);
}

}  // namespace
}  // namespace tilejit
