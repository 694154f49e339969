// The templates compiled into the library are byte for byte the files in kernels_templates/.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "compiler/codegen/CudaCodegen.h"
#include "kernels_templates/Embedded.h"
#include "tests/support/SourceTree.h"

namespace tilejit::testing {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(EmbeddedTemplates, MatchTheSourceFiles) {
  auto names = embedded_template_names();
  ASSERT_GE(names.size(), 2u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (std::string_view name : names) {
    std::string on_disk =
        read_file(tilejit::testing::source_dir() + "/kernels_templates/" + std::string(name));
    EXPECT_TRUE(embedded_template(name) == on_disk)
        << name << " differs from the file on disk (is the build stale?)";
  }
  EXPECT_TRUE(embedded_template("no_such.cuh").empty());
}

TEST(EmbeddedTemplates, EveryHeaderCodegenNamesIsEmbedded) {
  for (std::string_view h : dense_mask_template().headers)
    EXPECT_FALSE(embedded_template(h).empty()) << h;
}

}  // namespace
}  // namespace tilejit::testing
