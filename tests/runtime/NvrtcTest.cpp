#include <gtest/gtest.h>

#include <string>

#include "runtime/Nvrtc.h"
#include "tests/runtime/RuntimeTestSupport.h"

namespace tilejit {
namespace {

CompileRequest tiny_request(const std::string& arch, bool want_ptx) {
  KernelSpec spec = test::tiny_kernel_spec();
  return {.program_name = spec.program_name,
          .source = spec.source,
          .headers = spec.headers,
          .options = spec.options,
          .arch = arch,
          .want_ptx = want_ptx};
}

bool is_elf(const std::vector<char>& bytes) {
  return bytes.size() > 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' &&
         bytes[3] == 'F';
}

TEST(Nvrtc, VersionIsMajorDotMinor) {
  std::string v = nvrtc_version();
  EXPECT_EQ(v, "13.0");  // the toolkit this tree is built against
}

TEST(Nvrtc, CompilesForSm80WithPtx) {
  CompileResult result = nvrtc_compile(tiny_request("sm_80", /*want_ptx=*/true));
  EXPECT_TRUE(is_elf(result.cubin));
  EXPECT_NE(result.ptx.find(".entry tiny_scale"), std::string::npos) << result.ptx;
  EXPECT_NE(result.ptx.find(".target sm_80"), std::string::npos);
  EXPECT_GT(result.seconds, 0);
}

TEST(Nvrtc, CompilesForSm90a) {
  CompileResult result = nvrtc_compile(tiny_request("sm_90a", /*want_ptx=*/true));
  EXPECT_TRUE(is_elf(result.cubin));
  EXPECT_NE(result.ptx.find(".target sm_90a"), std::string::npos) << "the arch-specific target";
  EXPECT_TRUE(nvrtc_compile(tiny_request("sm_90a", /*want_ptx=*/false)).ptx.empty());
}

TEST(Nvrtc, CompileErrorCarriesLogOptionsAndNumberedSource) {
  CompileRequest request = tiny_request("sm_80", false);
  request.program_name = "broken_kernel.cu";
  request.source =
      "extern \"C\" __global__ void broken(float* y) {\n  y[0] = 1.0f;\n"
      "  y[1] = undeclared_name;\n}\n";
  request.options = {"-std=c++17", "-lineinfo"};
  try {
    nvrtc_compile(request);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("broken_kernel.cu"), std::string::npos) << what;
    EXPECT_NE(what.find("sm_80"), std::string::npos) << what;
    EXPECT_NE(what.find("-lineinfo"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_name"), std::string::npos) << what;
    EXPECT_NE(what.find("    3 |   y[1] = undeclared_name;"), std::string::npos) << what;
    EXPECT_FALSE(e.log().empty());
    EXPECT_NE(what.find(e.log()), std::string::npos);
  }
}

TEST(Nvrtc, MissingHeaderIsACompileErrorNotAToolkitLookup) {
  CompileRequest request = tiny_request("sm_80", false);
  request.headers.clear();  // "tiny_op.h" exists only in memory
  EXPECT_THROW(nvrtc_compile(request), CompileError);
}

TEST(Nvrtc, RejectsVirtualArchAndArchOptions) {
  EXPECT_THROW(nvrtc_compile(tiny_request("compute_80", false)), UserError);
  EXPECT_THROW(nvrtc_compile(tiny_request("", false)), UserError);
  CompileRequest request = tiny_request("sm_80", false);
  request.options.push_back("-arch=sm_90");
  EXPECT_THROW(nvrtc_compile(request), UserError);
}

TEST(Nvrtc, NumberLines) {
  EXPECT_EQ(number_lines("a\nb"), "    1 | a\n    2 | b\n");
  EXPECT_EQ(number_lines("a\n"), "    1 | a\n");
  EXPECT_EQ(number_lines(""), "    1 | \n");
  EXPECT_EQ(number_lines("\n\nx\n"), "    1 | \n    2 | \n    3 | x\n");
}

}  // namespace
}  // namespace tilejit
