// The cache key covers every input that can change the binary, and nothing else.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/KernelCache.h"
#include "tests/runtime/RuntimeTestSupport.h"

namespace tilejit {
namespace {

std::string key_of(const KernelSpec& spec, const std::string& arch = "sm_80") {
  return KernelCache::key(spec, arch);
}

TEST(KernelCacheKey, IsSha256Hex) {
  std::string k = key_of(test::tiny_kernel_spec());
  EXPECT_EQ(k.size(), 64u);
  EXPECT_TRUE(std::all_of(k.begin(), k.end(), [](char c) { return std::isxdigit(c); }));
  EXPECT_EQ(k, key_of(test::tiny_kernel_spec()));
}

TEST(KernelCacheKey, ChangesWithEachInput) {
  const KernelSpec base = test::tiny_kernel_spec();
  const std::string k = key_of(base);

  KernelSpec s = base;
  s.source += " ";
  EXPECT_NE(key_of(s), k) << "source";

  s = base;
  s.headers[0].second += "\n";
  EXPECT_NE(key_of(s), k) << "header content";

  s = base;
  s.headers[0].first = "tiny_op2.h";
  EXPECT_NE(key_of(s), k) << "header name";

  s = base;
  s.headers.push_back({"extra.h", ""});
  EXPECT_NE(key_of(s), k) << "an added (empty) header";

  s = base;
  s.options.push_back("-lineinfo");
  EXPECT_NE(key_of(s), k) << "an added option";

  s = base;
  s.options[0] = "-std=c++20";
  EXPECT_NE(key_of(s), k) << "an option's value";

  s = base;
  s.entry_points.push_back("other_entry");
  EXPECT_NE(key_of(s), k) << "entry points";

  EXPECT_NE(key_of(base, "sm_90a"), k) << "arch";
  EXPECT_NE(key_of(base, "sm_90a"), key_of(base, "sm_90")) << "arch-specific target";
}

TEST(KernelCacheKey, FieldBoundariesCannotCollide) {
  KernelSpec a = test::tiny_kernel_spec();
  KernelSpec b = a;
  a.options = {"-DA", "B"};
  b.options = {"-DAB"};
  EXPECT_NE(key_of(a), key_of(b));
  a.headers = {{"h", "xy"}};
  b.headers = {{"hx", "y"}};
  EXPECT_NE(key_of(a), key_of(b));
}

TEST(KernelCacheKey, IgnoresOrderAndNames) {
  const KernelSpec base = test::tiny_kernel_spec();
  KernelSpec a = base;
  a.options = {"-std=c++17", "-lineinfo", "-DX=1"};
  a.headers.push_back({"b.h", "int b;"});
  KernelSpec b = a;
  std::reverse(b.options.begin(), b.options.end());
  std::reverse(b.headers.begin(), b.headers.end());
  EXPECT_EQ(key_of(a), key_of(b)) << "option and header order";

  KernelSpec renamed = base;
  renamed.program_name = "another_name.cu";
  renamed.variant = "another variant";
  EXPECT_EQ(key_of(renamed), key_of(base)) << "names are metadata, not identity";
}

}  // namespace
}  // namespace tilejit
