// What the kernel cache does with a damaged, unsafe or unwritable disk: never load a bad entry,
// never fail a request because of the disk.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "runtime/CacheEntry.h"
#include "runtime/KernelCache.h"
#include "tests/runtime/RuntimeTestSupport.h"

namespace tilejit {
namespace {

using test::disk_options;
using test::TempDir;
using test::tiny_kernel_spec;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// A directory holding one valid entry for `spec` on sm_80; returns the entry's path.
std::filesystem::path populate(const std::filesystem::path& dir, const KernelSpec& spec) {
  KernelCache writer(disk_options(dir));
  auto kernel = writer.get(spec, "sm_80");
  return writer.entry_path(kernel->key, "sm_80");
}

CompiledKernel::Source fetch(const std::filesystem::path& dir, const KernelSpec& spec,
                             KernelCacheStats* stats = nullptr) {
  KernelCache cache(disk_options(dir));
  CompiledKernel::Source how{};
  cache.get(spec, "sm_80", &how);
  if (stats) *stats = cache.stats();
  return how;
}

CompiledKernel sample_kernel() {
  CompiledKernel k;
  k.key = std::string(64, 'a');
  k.arch = "sm_80";
  k.cubin = {'\x7f', 'E', 'L', 'F', '1', '2', '3'};
  k.entry_points = {"first", "second"};
  k.program_name = "p.cu";
  k.variant = "v";
  k.compile_seconds = 0.25;
  return k;
}

TEST(CacheEntry, RoundTripsAndCatchesEveryFlippedByte) {
  CompiledKernel k = sample_kernel();
  std::string bytes = encode_cache_entry(k);
  CompiledKernel out;
  ASSERT_EQ(decode_cache_entry(bytes, k.key, "sm_80", out), "");
  EXPECT_EQ(out.cubin, k.cubin);
  EXPECT_EQ(out.entry_points, k.entry_points);
  EXPECT_EQ(out.program_name, "p.cu");
  EXPECT_EQ(out.variant, "v");
  EXPECT_DOUBLE_EQ(out.compile_seconds, 0.25);
  EXPECT_EQ(out.source, CompiledKernel::DiskHit);

  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] ^= 0x01;
    EXPECT_NE(decode_cache_entry(damaged, k.key, "sm_80", out), "") << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_NE(decode_cache_entry(bytes.substr(0, n), k.key, "sm_80", out), "") << "length " << n;
  }
  EXPECT_NE(decode_cache_entry(bytes, std::string(64, 'b'), "sm_80", out), "") << "other key";
  EXPECT_NE(decode_cache_entry(bytes, k.key, "sm_90a", out), "") << "other arch";
}

TEST(KernelCacheDisk, TruncatedEntryIsRebuilt) {
  TempDir tmp;
  KernelSpec spec = tiny_kernel_spec("truncated");
  auto entry = populate(tmp.path(), spec);
  std::string bytes = read_file(entry);
  write_file(entry, bytes.substr(0, bytes.size() / 2));

  KernelCacheStats stats;
  testing::internal::CaptureStderr();
  EXPECT_EQ(fetch(tmp.path(), spec, &stats), CompiledKernel::Compiled);
  std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("discarding"), std::string::npos) << warning;
  EXPECT_EQ(stats.disk_rejected, 1u);
  CacheEntryRead rewritten = read_cache_entry(entry, KernelCache::key(spec, "sm_80"), "sm_80");
  EXPECT_EQ(rewritten.status, CacheEntryRead::Loaded) << "rewritten whole: " << rewritten.problem;
  EXPECT_EQ(fetch(tmp.path(), spec), CompiledKernel::DiskHit);
}

TEST(KernelCacheDisk, CorruptedEntryIsRebuilt) {
  TempDir tmp;
  KernelSpec spec = tiny_kernel_spec("corrupted");
  auto entry = populate(tmp.path(), spec);
  std::string bytes = read_file(entry);
  std::string damaged = bytes;
  damaged[damaged.size() / 2] ^= 0x40;  // inside the cubin
  write_file(entry, damaged);

  KernelCacheStats stats;
  testing::internal::CaptureStderr();
  EXPECT_EQ(fetch(tmp.path(), spec, &stats), CompiledKernel::Compiled);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(stats.disk_rejected, 1u);
  EXPECT_EQ(fetch(tmp.path(), spec), CompiledKernel::DiskHit);
}

// Root ignores permission bits, so for root an unwritable cache directory is simulated by a path
// that runs through a regular file (mkdir fails with ENOTDIR); other users get a 0500 directory.
TEST(KernelCacheDisk, UnwritableDirectoryDegradesToMemoryWithOneWarning) {
  TempDir tmp;
  std::filesystem::path dir;
  if (::geteuid() == 0) {
    write_file(tmp.path() / "a_file", "");
    dir = tmp.path() / "a_file" / "cache";
  } else {
    dir = tmp.path() / "read_only";
    std::filesystem::create_directory(dir);
    std::filesystem::permissions(
        dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  }
  KernelCache cache(disk_options(dir));
  testing::internal::CaptureStderr();
  CompiledKernel::Source how{};
  auto a = cache.get(tiny_kernel_spec("read-only a"), "sm_80", &how);
  EXPECT_EQ(how, CompiledKernel::Compiled);
  cache.get(tiny_kernel_spec("read-only b"), "sm_80");
  cache.get(tiny_kernel_spec("read-only a"), "sm_80", &how);
  EXPECT_EQ(how, CompiledKernel::MemoryHit);
  std::string warnings = testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("not writable"), std::string::npos) << warnings;
  EXPECT_EQ(warnings.find("not writable"), warnings.rfind("not writable")) << "warned once";
  EXPECT_EQ(cache.stats().compiles, 2u);
  EXPECT_EQ(cache.stats().disk_write_failures, 1u);
  if (::geteuid() != 0) std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
}

TEST(KernelCacheDisk, WorldWritableEntryIsRefused) {
  TempDir tmp;
  KernelSpec spec = tiny_kernel_spec("world writable");
  auto entry = populate(tmp.path(), spec);
  ::chmod(entry.c_str(), 0602);
  KernelCacheStats stats;
  testing::internal::CaptureStderr();
  EXPECT_EQ(fetch(tmp.path(), spec, &stats), CompiledKernel::Compiled);
  std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("refusing"), std::string::npos) << warning;
  EXPECT_NE(warning.find("writable by group or others"), std::string::npos) << warning;
  EXPECT_EQ(stats.disk_rejected, 1u);
  struct stat st {};
  ASSERT_EQ(::stat(entry.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0602u) << "left alone, not loaded and not replaced";
}

TEST(KernelCacheDisk, ForeignOwnedEntryIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  TempDir tmp;
  KernelSpec spec = tiny_kernel_spec("foreign");
  auto entry = populate(tmp.path(), spec);
  const uid_t other = 4242;
  ASSERT_EQ(::chown(entry.c_str(), other, other), 0);
  KernelCacheStats stats;
  testing::internal::CaptureStderr();
  EXPECT_EQ(fetch(tmp.path(), spec, &stats), CompiledKernel::Compiled);
  std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("owned by uid 4242"), std::string::npos) << warning;
  EXPECT_EQ(stats.disk_rejected, 1u);
  struct stat st {};
  ASSERT_EQ(::stat(entry.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, other) << "left alone, not replaced";
}

TEST(KernelCacheDisk, SymlinkedEntryIsRefused) {
  TempDir tmp;
  KernelSpec spec = tiny_kernel_spec("symlink");
  auto entry = populate(tmp.path(), spec);
  std::filesystem::rename(entry, tmp.path() / "elsewhere");
  std::filesystem::create_symlink(tmp.path() / "elsewhere", entry);
  KernelCacheStats stats;
  testing::internal::CaptureStderr();
  EXPECT_EQ(fetch(tmp.path(), spec, &stats), CompiledKernel::Compiled);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(stats.disk_rejected, 1u);
}

}  // namespace
}  // namespace tilejit
