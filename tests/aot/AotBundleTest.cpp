// Ahead-of-time bundles end to end, without a GPU (NVRTC only): a manifest built into a
// directory loads back offline with no compile, a program left out is an OfflineMiss that names
// it, a bundle from another tilejit or NVRTC is refused, a truncated entry is caught by
// verification, and two builds racing into one directory leave a valid bundle.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <set>

#include "runtime/AotBundle.h"
#include "runtime/CacheMaintenance.h"
#include "runtime/KernelCache.h"
#include "runtime/Nvrtc.h"
#include "runtime/Version.h"
#include "tests/runtime/RuntimeTestSupport.h"

namespace tilejit {
namespace {

namespace fs = std::filesystem;
using test::disk_options;
using test::TempDir;

const char* kCausal = "attention aot_causal {\n  mask = q >= kv\n}\n";
const char* kWindow =
    "attention aot_window {\n  param window : i32\n  mask = q >= kv && q - kv < window\n}\n";
const char* kPrefix =
    "attention aot_prefix {\n  buffer prefix : i32[B]\n  mask = kv < prefix[b] || q >= kv\n}\n";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
}

// Small variants keep the compiles short: fp16 at head dim 64.
const KernelVariantOptions kVariant{.dtype = DType::F16, .head_dim = 64};

AotOptions options_for(const fs::path& dir, int jobs = 2) {
  return {.dir = dir, .archs = {"sm_90a"}, .jobs = jobs, .on_progress = {}};
}

// One bundle of two programs, built once for the suite.
class AotBundle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sources_ = new TempDir();
    bundle_ = new TempDir();
    write_file(sources_->path() / "causal.tj", kCausal);
    write_file(sources_->path() / "window.tj", kWindow);
    write_file(sources_->path() / "prefix.tj", kPrefix);
    write_file(sources_->path() / "manifest.txt",
               "# two programs\ncausal.tj dtype=fp16 head_dim=64\nwindow.tj dtype=fp16 "
               "head_dim=64  # trailing comment\n");
    manifest_ = load_aot_manifest(sources_->path() / "manifest.txt");
    result_ = new AotResult(build_aot_bundle(manifest_, options_for(bundle_->path())));
  }
  static void TearDownTestSuite() {
    delete result_;
    delete bundle_;
    delete sources_;
  }

  static std::vector<ProgramKernel> kernels_of(const char* file) {
    return program_kernels(load_program((sources_->path() / file).string()), kVariant);
  }

  // A copy of the bundle to damage.
  static void copy_bundle(const fs::path& to) {
    fs::copy(bundle_->path(), to,
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  }

  static inline TempDir* sources_ = nullptr;
  static inline TempDir* bundle_ = nullptr;
  static inline std::vector<AotManifestEntry> manifest_;
  static inline AotResult* result_ = nullptr;
};

TEST_F(AotBundle, BuildsEveryKernelAndIndexesThem) {
  ASSERT_TRUE(result_->failures.empty()) << result_->failures[0].message;
  ASSERT_EQ(result_->index_problem, "");
  // One index line per (program, kernel); a kernel two programs share is built once.
  std::set<std::string> keys;
  size_t expected = 0;
  for (const char* file : {"causal.tj", "window.tj"}) {
    for (const ProgramKernel& k : kernels_of(file)) {
      keys.insert(KernelCache::key(k.spec, "sm_90a"));
      ++expected;
    }
  }
  EXPECT_EQ(result_->kernels, keys.size());
  EXPECT_EQ(result_->compiled, keys.size());
  auto index = read_bundle_index(bundle_->path());
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(index->tilejit_version, version());
  EXPECT_EQ(index->nvrtc_version, nvrtc_version());
  ASSERT_EQ(index->kernels.size(), expected);
  for (const BundleKernel& k : index->kernels) {
    EXPECT_TRUE(k.program == "aot_causal" || k.program == "aot_window") << k.program;
    EXPECT_EQ(k.program_hash.size(), 64u);
    EXPECT_EQ(k.variant, "fp16 d64");
    EXPECT_EQ(k.arch, "sm_90a");
    EXPECT_FALSE(k.entry_points.empty());
    EXPECT_TRUE(fs::exists(bundle_->path() / (k.key + ".tjk"))) << k.kernel;
  }
  // The index reads back exactly as written.
  EXPECT_EQ(format_bundle_index(*index), read_file(bundle_->path() / kBundleIndexFile));
}

TEST_F(AotBundle, LoadsOfflineWithoutCompiling) {
  KernelCache cache(disk_options(bundle_->path(), /*offline=*/true));
  for (const char* file : {"causal.tj", "window.tj"}) {
    for (const ProgramKernel& k : kernels_of(file)) {
      CompiledKernel::Source how{};
      auto kernel = cache.get(k.spec, "sm_90a", &how);
      // A kernel both programs share is read from disk once, then found in memory.
      EXPECT_NE(how, CompiledKernel::Compiled) << file << " " << k.variant;
      EXPECT_FALSE(kernel->cubin.empty());
    }
  }
  EXPECT_EQ(cache.stats().compiles, 0u);
  EXPECT_EQ(cache.stats().disk_rejected, 0u);
}

TEST_F(AotBundle, MissingProgramVariantOrArchIsAnOfflineMissNamingIt) {
  KernelCache cache(disk_options(bundle_->path(), /*offline=*/true));
  auto expect_miss = [&](const ProgramKernel& k, const std::string& arch,
                         const std::string& program) {
    try {
      cache.get(k.spec, arch);
      ADD_FAILURE() << "expected an OfflineMiss for " << program << " " << k.variant;
    } catch (const OfflineMiss& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(program), std::string::npos) << what;
      EXPECT_NE(what.find(k.variant), std::string::npos) << what;
      EXPECT_NE(what.find(arch), std::string::npos) << what;
    }
  };
  expect_miss(kernels_of("prefix.tj").front(), "sm_90a", "aot_prefix");
  expect_miss(kernels_of("causal.tj").back(), "sm_80", "aot_causal");
  auto bf16 = program_kernels(load_program((sources_->path() / "causal.tj").string()),
                              {.dtype = DType::BF16, .head_dim = 128});
  expect_miss(bf16.back(), "sm_90a", "aot_causal");
  EXPECT_EQ(cache.stats().compiles, 0u);
}

TEST_F(AotBundle, RefusesABundleFromAnotherTilejitOrNvrtc) {
  ProgramKernel kernel = kernels_of("causal.tj").front();
  std::string index = read_file(bundle_->path() / kBundleIndexFile);
  struct Case {
    std::string field, current, other, says;
  };
  for (const Case& c : {Case{"tilejit_version", std::string(version()), "0.0.0-other", "tilejit"},
                        Case{"nvrtc_version", nvrtc_version(), "1.0", "NVRTC"}}) {
    TempDir copy;
    copy_bundle(copy.path());
    std::string from = "\"" + c.field + "\": \"" + c.current + "\"";
    std::string changed = index;
    ASSERT_NE(changed.find(from), std::string::npos) << from;
    changed.replace(changed.find(from), from.size(), "\"" + c.field + "\": \"" + c.other + "\"");
    write_file(copy.path() / kBundleIndexFile, changed);

    KernelCache cache(disk_options(copy.path(), /*offline=*/true));
    try {
      cache.get(kernel.spec, "sm_90a");
      ADD_FAILURE() << "a bundle naming " << c.field << " " << c.other << " was accepted";
    } catch (const BundleVersionMismatch& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(c.says + " " + c.other), std::string::npos) << what;
    }
    // Online, the index is not consulted: the entries are simply used.
    KernelCache online(disk_options(copy.path(), /*offline=*/false));
    EXPECT_NO_THROW(online.get(kernel.spec, "sm_90a"));
  }
}

TEST_F(AotBundle, VerifyFindsATruncatedEntry) {
  TempDir copy;
  copy_bundle(copy.path());
  auto entries = list_cache_entries(copy.path());
  ASSERT_EQ(entries.size(), result_->kernels);
  for (const CacheEntryListing& e : entries) {
    EXPECT_EQ(e.problem, "") << e.file;
    EXPECT_EQ(e.arch, "sm_90a");
    EXPECT_TRUE(e.program == "aot_causal" || e.program == "aot_window") << e.program;
  }
  fs::path victim = entries[entries.size() / 2].file;
  std::string bytes = read_file(victim);
  write_file(victim, bytes.substr(0, bytes.size() * 2 / 3));

  size_t bad = 0;
  for (const CacheEntryListing& e : list_cache_entries(copy.path())) {
    if (e.problem.empty()) continue;
    ++bad;
    EXPECT_EQ(e.file, victim);
  }
  EXPECT_EQ(bad, 1u);

  // Pruning to nothing removes every entry, oldest first.
  PruneResult pruned = prune_cache(copy.path(), {.max_bytes = 0, .older_than_days = {}});
  EXPECT_EQ(pruned.removed.size(), entries.size());
  EXPECT_TRUE(list_cache_entries(copy.path()).empty());
}

TEST_F(AotBundle, ConcurrentBuildsIntoOneDirectoryLeaveAValidBundle) {
  TempDir dir;
  // The causal program's entries are already there; both builds race on the window program.
  BundleIndex built = *read_bundle_index(bundle_->path());
  for (const BundleKernel& k : built.kernels) {
    if (k.program == "aot_causal")
      fs::copy_file(bundle_->path() / (k.key + ".tjk"), dir.path() / (k.key + ".tjk"),
                    fs::copy_options::overwrite_existing);
  }
  std::vector<AotManifestEntry> both = manifest_, window = {manifest_[1]};
  pid_t children[2];
  for (int i = 0; i < 2; ++i) {
    children[i] = ::fork();
    ASSERT_GE(children[i], 0);
    if (children[i] == 0) {
      AotResult r = build_aot_bundle(i == 0 ? both : window, options_for(dir.path(), 1));
      ::_exit(r.failures.empty() && r.index_problem.empty() ? 0 : 1);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto index = read_bundle_index(dir.path());
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(format_bundle_index(*index), format_bundle_index(built));
  for (const CacheEntryListing& e : list_cache_entries(dir.path())) EXPECT_EQ(e.problem, "");
  for (const auto& f : fs::directory_iterator(dir.path()))
    EXPECT_EQ(f.path().string().find(".tmp."), std::string::npos) << f.path();
  KernelCache cache(disk_options(dir.path(), /*offline=*/true));
  for (const char* file : {"causal.tj", "window.tj"}) {
    for (const ProgramKernel& k : kernels_of(file)) EXPECT_NO_THROW(cache.get(k.spec, "sm_90a"));
  }
}

TEST(AotManifest, ParsesVariantsAndRejectsBadLines) {
  auto entries = parse_aot_manifest(
      "# comment\n\na.tj dtype=bf16,fp16 head_dim=64,128\n/abs/b.tj\n", "/base", "m.txt");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].program_file, fs::path("/base/a.tj"));
  EXPECT_EQ(entries[0].dtypes.size(), 2u);
  EXPECT_EQ(entries[0].head_dims, (std::vector<int>{64, 128}));
  EXPECT_EQ(entries[0].line, 3);
  EXPECT_EQ(entries[1].program_file, fs::path("/abs/b.tj"));
  EXPECT_EQ(entries[1].head_dims, (std::vector<int>{128}));
  for (const char* bad :
       {"a.tj dtype=f32\n", "a.tj head_dim=x\n", "a.tj color=red\n", "a.tj x\n"}) {
    try {
      parse_aot_manifest(bad, "/base", "m.txt");
      ADD_FAILURE() << bad;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("m.txt:1"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tilejit
