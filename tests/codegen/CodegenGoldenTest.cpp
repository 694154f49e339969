// Generated CUDA compared, text for text, with the checked-in goldens. Run with
// TILEJIT_UPDATE_GOLDENS=1 to rewrite them after an intended change (and review the diff).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "compiler/codegen/CudaCodegen.h"
#include "tests/codegen/CodegenTestPrograms.h"
#include "tests/support/SourceTree.h"

namespace tilejit::testing {
namespace {

std::string golden_path(const std::string& name) {
  return tilejit::testing::source_dir() + "/tests/codegen/golden/" + name;
}

void check_golden(const std::string& name, const std::string& actual) {
  const std::string path = golden_path(name);
  const char* update = std::getenv("TILEJIT_UPDATE_GOLDENS");
  if (update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is missing; run with TILEJIT_UPDATE_GOLDENS=1 to create it";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(expected.str(), actual)
      << "generated code differs from " << path << " (TILEJIT_UPDATE_GOLDENS=1 rewrites it)";
}

TEST(CodegenGolden, DocSoftcap) {
  Expr grad;
  AttentionProgram p = golden_doc_softcap(&grad);
  check_golden("doc_softcap.cu", generate_kernel(p, grad, dense_mask_template()).source);
}

TEST(CodegenGolden, SelectBranches) {
  Expr grad;
  AttentionProgram p = golden_select_branches(&grad);
  check_golden("select_branches.cu", generate_kernel(p, grad, dense_mask_template()).source);
}

TEST(CodegenGolden, RowColumnBias) {
  Expr grad;
  AttentionProgram p = golden_row_column_bias(&grad);
  check_golden("row_column_bias_hooks.cu", generate_hooks(p, grad));
}

TEST(CodegenGolden, Plain) {
  Expr grad;
  AttentionProgram p = golden_plain(&grad);
  check_golden("plain.cu", generate_dense_mask(p, grad).source);
}

TEST(CodegenGolden, LossHooks) {
  Expr grad;
  LossProgram p = golden_loss_softcap(&grad);
  check_golden("loss_softcap_hooks.cu", generate_hooks(p, grad));
}

TEST(CodegenGolden, LossHookParts) {
  Expr grad;
  LossProgram p = golden_loss_row_temperature(&grad);
  check_golden("loss_row_temperature_hooks.cu", generate_hooks(p, grad));
}

TEST(Codegen, EntryPointNamedByVariantAndHash) {
  Expr grad;
  AttentionProgram p = golden_doc_softcap(&grad);
  CudaSource s = generate_dense_mask(p, grad);
  EXPECT_EQ(s.entry.substr(0, 14), "tj_dense_mask_");
  EXPECT_EQ(s.entry.size(), 14u + 16u);
  EXPECT_EQ(s.file_name, s.entry + ".cu");
  EXPECT_EQ(s.headers, (std::vector<std::string>{"common.cuh", "dense_mask.cuh"}));
  EXPECT_NE(s.source.find("extern \"C\" __global__ void " + s.entry + "("), std::string::npos);
  // A different program, a different entry point.
  p.mask = dsl::q >= dsl::kv;
  EXPECT_NE(generate_dense_mask(p, grad).entry, s.entry);
}

TEST(Codegen, SharedNodesComputedOnce) {
  using namespace dsl;
  AttentionProgram p;
  p.name = "shared";
  Expr d = q - kv;
  p.mask = (d * d > 4) || (d * d < -4);
  std::string src = generate_dense_mask(p, Expr()).source;
  size_t first = src.find("tj_mul(");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(src.find("tj_mul(", first + 1), std::string::npos) << src;
}

// A product a hook part holds whole (w * cols[b, kv]) is read from the part by the folded logits,
// not loaded again per element: the buffer is read once, in score_kv.
TEST(Codegen, FoldedLogitsReadPartHeldProductsFromTheirPart) {
  Expr grad;
  AttentionProgram p = golden_row_column_bias(&grad);
  std::string src = generate_hooks(p, grad);
  size_t first = src.find("tj_load(a.cols");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(src.find("tj_load(a.cols", first + 1), std::string::npos) << src;
  EXPECT_LT(first, src.find("score_mod(const TjArgs& a, const ScoreQ& qp")) << src;
}

TEST(Codegen, SelectArmsReadOnlyInsideTheirBranch) {
  Expr grad;
  AttentionProgram p = golden_select_branches(&grad);
  std::string src = generate_dense_mask(p, grad).source;
  // The mask's doc reads happen inside the if: no load precedes the branch on q < n.
  size_t mask = src.find("mask_mod(");
  size_t branch = src.find("if (", mask);
  size_t load = src.find("tj_load(a.doc", mask);
  ASSERT_NE(branch, std::string::npos);
  EXPECT_LT(branch, load) << src;
}

// The text of the generated function whose declaration starts with `signature`, to its end.
std::string function_text(const std::string& src, const std::string& signature) {
  size_t begin = src.find(signature);
  if (begin == std::string::npos) return {};
  size_t end = src.find("\n  }\n", begin);
  return src.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// Divisions by a part's value happen in the parts, once: the per-logit hooks multiply by the
// reciprocals, and the hooks of (logit, row, id) alone compute their parts first.
TEST(Codegen, LossHooksDivideByPartsOnce) {
  Expr grad;
  LossProgram p = golden_loss_row_temperature(&grad);
  const std::string src = generate_hooks(p, grad);
  for (const char* hook : {"logit_mod", "logit_grad"}) {
    const std::string parted =
        function_text(src, fmt::format("static float {}(const TjArgs& a, const", hook));
    ASSERT_FALSE(parted.empty()) << hook << " with parts is missing:\n" << src;
    EXPECT_EQ(parted.find("tj_fdiv("), std::string::npos) << parted;
    EXPECT_NE(parted.find("tj_fdiv_recip(logit, cp.r0)"), std::string::npos) << parted;
    EXPECT_NE(parted.find(", rp.r0)"), std::string::npos) << parted;
  }
  EXPECT_NE(function_text(src, "static LogitConst logit_const(const TjArgs& a)")
                .find("return {tj_recip(a.cap)};"),
            std::string::npos)
      << src;
  EXPECT_NE(function_text(src, "static LogitRow logit_row(const TjArgs& a, int row)")
                .find("tj_load(a.temp, row)"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("return logit_mod(a, logit_const(a), logit_row(a, row), logit, row, id);"),
            std::string::npos)
      << src;
  EXPECT_NE(src.find("return logit_grad(a, grad_const(a), grad_row(a, row), logit, row, id);"),
            std::string::npos)
      << src;
}

TEST(Codegen, UnusableNamesAreRenamed) {
  using namespace dsl;
  Buffer buf("int", ElemType::F32, {"S"});
  AttentionProgram p;
  p.name = "odd \"name\"";
  p.buffers = {{"int", ElemType::F32, {"S"}}};
  p.mask = buf(kv) > 0.0;
  std::string src = generate_dense_mask(p, Expr()).source;
  EXPECT_NE(src.find("TjBuffer<float, 1> field0_;"), std::string::npos) << src;
  EXPECT_NE(src.find("tj_load(a.field0_, kv)"), std::string::npos) << src;
  EXPECT_NE(src.find("#line 1 \"odd__name_.tj\""), std::string::npos) << src;
}

}  // namespace
}  // namespace tilejit::testing
