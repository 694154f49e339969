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

// separate_score: score plus terms of the row, of the column and of kv - q (ScoreFold.h's
// SeparableScore), each with its sign and factors; anything else is left to the per-element logit.
std::optional<SeparableScore> separated(const Expr& body) {
  return separate_score(body, fold_score(body));
}

TEST(SeparableScore, AlibiIsOneDistanceTerm) {
  Buffer slopes("slopes", ElemType::F32, {"H"});
  Expr distance = f32(kv - q);
  std::optional<SeparableScore> sep = separated(score + slopes(h) * distance);
  ASSERT_TRUE(sep.has_value());
  ASSERT_EQ(sep->terms.size(), 1u);
  const SeparableScore::Term& t = sep->terms[0];
  EXPECT_EQ(t.kind, SeparableScore::Kind::Distance);
  EXPECT_FALSE(t.negated);
  EXPECT_TRUE(t.leaf.same_as(distance));
  ASSERT_EQ(t.factors.size(), 1u);
  EXPECT_TRUE(t.factors[0].same_as(slopes(h)));
}

TEST(SeparableScore, RowColumnAndDistanceTermsWithTheirSigns) {
  Buffer rows("rows", ElemType::F32, {"S"}), cols("cols", ElemType::F32, {"S"});
  Param w("w", Type::F32);
  // - 0.5 * f32(q - kv) is + 0.5 * f32(kv - q); - (w * cols[kv]) a negated column term
  std::optional<SeparableScore> sep =
      separated(rows(q) + score - lit(0.5) * f32(q - kv) - w * cols(kv) + f32(h));
  ASSERT_TRUE(sep.has_value());
  using Kind = SeparableScore::Kind;
  ASSERT_EQ(sep->terms.size(), 4u);
  int row = 0, column = 0, distance = 0;
  for (const SeparableScore::Term& t : sep->terms) {
    if (t.kind == Kind::Row) ++row;
    if (t.kind == Kind::Column) {
      ++column;
      EXPECT_TRUE(t.negated);
      ASSERT_EQ(t.factors.size(), 1u);
      EXPECT_TRUE(t.factors[0].same_as(Expr(w)));
    }
    if (t.kind == Kind::Distance) {
      ++distance;
      EXPECT_FALSE(t.negated);
    }
  }
  EXPECT_EQ(row, 2);  // rows[q] and f32(h)
  EXPECT_EQ(column, 1);
  EXPECT_EQ(distance, 1);
  EXPECT_TRUE(sep->has(Kind::Column));
}

TEST(SeparableScore, OtherScoresAreNotSeparable) {
  Buffer slopes("slopes", ElemType::F32, {"H"}), rows("rows", ElemType::F32, {"S"});
  Param temp("temp", Type::F32), cap("cap", Type::F32);
  EXPECT_FALSE(separated(score * temp + f32(kv - q)));        // score with a factor
  EXPECT_FALSE(separated(-score + f32(kv - q)));              // score negated
  EXPECT_FALSE(separated(score + score * temp));              // score twice
  EXPECT_FALSE(separated(score + abs(f32(q - kv))));          // not linear in kv - q
  EXPECT_FALSE(separated(score + f32(q) * f32(kv)));          // a product of row and column
  EXPECT_FALSE(separated(score + rows(q) * f32(kv - q)));     // a distance factor of the row
  EXPECT_FALSE(separated(score + f32(kv - q + 1)));           // not the bare difference
  EXPECT_FALSE(separated(cap * tanh(score / cap)));           // score below the top
  EXPECT_TRUE(separated(score + slopes(h) * f32(kv - q) * temp).has_value());
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
