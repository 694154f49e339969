// Which multiplications around score_mod the generator folds (compiler/codegen/ScoreFold.h): the
// linear top log2e distributes over, the one node through which the rest reads score, and the
// programs left as written. The values the folded hooks compute are checked on the GPU against
// the interpreter (HookValuesGpuTest) and through the attention kernels (AttentionGpuTest).
#include <gtest/gtest.h>

#include "compiler/codegen/CudaCodegen.h"
#include "compiler/codegen/ScoreFold.h"
#include "dsl/Expr.h"

namespace tilejit::testing {
namespace {

using namespace dsl;

bool in_linear_top(const ScoreFold& f, const Expr& e) { return f.linear.contains(e.get()); }

TEST(ScoreFold, SoftCapFoldsItsDivisorAndItsFactor) {
  Param cap("cap", Type::F32);
  Expr inner = score / cap, body = cap * tanh(inner);
  ScoreFold f = fold_score(body);
  EXPECT_TRUE(f.folds());
  EXPECT_TRUE(in_linear_top(f, body));
  EXPECT_EQ(f.linear.size(), 1u);
  ASSERT_TRUE(f.entry.defined());
  EXPECT_TRUE(f.entry.same_as(inner));
  EXPECT_FALSE(f.reads_score_otherwise);
}

TEST(ScoreFold, AlibiDistributesOverTheSumAndTheSlope) {
  Buffer slopes("slopes", ElemType::F32, {"H"});
  Expr bias = slopes(h) * f32(kv - q), body = score + bias;
  ScoreFold f = fold_score(body);
  EXPECT_TRUE(f.folds());
  EXPECT_TRUE(in_linear_top(f, body));
  EXPECT_TRUE(in_linear_top(f, bias));  // log2e joins the slope, not each element
  EXPECT_EQ(factor_operand(bias), 0);   // the factor that does not depend on kv
  EXPECT_FALSE(f.entry.defined());
  EXPECT_FALSE(f.reads_score_otherwise);
}

TEST(ScoreFold, ProductsAndDifferencesOnTheTop) {
  Param temp("temp", Type::F32);
  Expr scaled = score * temp, penalty = lit(0.25) * abs(f32(q - kv)) / 64.0;
  Expr body = -(scaled - penalty);
  ScoreFold f = fold_score(body);
  EXPECT_TRUE(in_linear_top(f, body));
  EXPECT_TRUE(in_linear_top(f, scaled));
  EXPECT_EQ(factor_operand(scaled), 1);
  EXPECT_FALSE(in_linear_top(f, penalty));  // a quotient: one multiply by log2e after it
  EXPECT_FALSE(f.entry.defined());
  EXPECT_FALSE(f.reads_score_otherwise);
}

TEST(ScoreFold, OneQuotientReadTwiceIsOneEntry) {
  Param cap("cap", Type::F32);
  Expr inner = score / cap;
  ScoreFold f = fold_score(tanh(inner) + inner * 0.5);
  ASSERT_TRUE(f.entry.defined());
  EXPECT_TRUE(f.entry.same_as(inner));
  EXPECT_FALSE(f.reads_score_otherwise);
}

TEST(ScoreFold, ScoreReadOtherwiseIsLeftAsWritten) {
  Param cap("cap", Type::F32);
  // score read directly below the top, and through a quotient: no single entry
  ScoreFold mixed = fold_score(tanh(score / cap) * score);
  EXPECT_FALSE(mixed.entry.defined());
  EXPECT_TRUE(mixed.reads_score_otherwise);
  EXPECT_FALSE(mixed.folds());
  // a comparison and a select read score: nothing to fold
  ScoreFold select_body = fold_score(select(score > 0.0, score, score * 0.1));
  EXPECT_FALSE(select_body.folds());
  EXPECT_TRUE(select_body.reads_score_otherwise);
  // a quotient by something that reads score is no entry
  ScoreFold self = fold_score(tanh(score / (score + cap)));
  EXPECT_FALSE(self.entry.defined());
  EXPECT_TRUE(self.reads_score_otherwise);
}

// kScoreUsesXu: per-element multi-function work on score (tanh, rsqrt, a float division of it),
// but not a transcendental of the positions or of a param alone, and not arithmetic.
TEST(ScoreUsesXu, MarksPerElementTranscendentalsOfScoreOnly) {
  Param cap("cap", Type::F32);
  Buffer slopes("slopes", ElemType::F32, {"H"});
  EXPECT_TRUE(score_uses_xu(cap * tanh(score / cap)));
  EXPECT_TRUE(score_uses_xu(score * rsqrt(score * score + 1.0f)));
  EXPECT_TRUE(score_uses_xu(score / (abs(score) + cap)));
  EXPECT_FALSE(score_uses_xu(score));
  EXPECT_FALSE(score_uses_xu(score + slopes(h) * f32(kv - q)));
  EXPECT_FALSE(score_uses_xu(score * exp2(f32(h) * -0.5f)));
  EXPECT_FALSE(score_uses_xu(score + tanh(f32(kv - q) / cap)));
}

}  // namespace
}  // namespace tilejit::testing
