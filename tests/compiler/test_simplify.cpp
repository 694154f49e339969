// Simplification never changes a value, and does simplify what it should.
//
// Which comparison is right: the simplifier folds each f32 operation as f32 hardware computes
// it (fp64, then rounded to f32). Against the fp64 reference no tolerance is sound: one folded
// constant rounded to f32 can flip a later comparison, change an i32 cast, or be magnified
// without bound by cancellation. The interpreter's F32 precision rounds every operation the
// same way, so original and simplified programs must agree there bit for bit (NaN matching any
// NaN, -0.0 and +0.0 kept apart). Where no float constant is folded, the fp64 reference must
// agree exactly too, which the second property checks.
#include <gtest/gtest.h>

#include <limits>

#include "compiler/Interpreter.h"
#include "compiler/Printer.h"
#include "compiler/Simplify.h"
#include "dsl/Expr.h"
#include "tests/compiler/RandomBindings.h"
#include "tests/support/RandomProgram.h"

namespace tilejit {
namespace {

using namespace tilejit::dsl;

void expect_same_values(const Expr& original, const Expr& simplified,
                        const testing::RandomBindings& bind, std::mt19937_64& rng,
                        FloatPrecision precision, int points) {
  for (int i = 0; i < points; ++i) {
    EvalContext c = bind.point(rng, precision);
    Value want = evaluate(original, c), got = evaluate(simplified, c);
    ASSERT_TRUE(testing::same_value(want, got))
        << "original:   " << print_expr(original) << "\nsimplified: " << print_expr(simplified)
        << "\nat b=" << c.b << " h=" << c.h << " q=" << c.q << " kv=" << c.kv << " row=" << c.row
        << " id=" << c.id << " score=" << c.score << " logit=" << c.logit << "\nwant "
        << testing::show(want) << ", got " << testing::show(got);
  }
}

TEST(Simplify, PreservesValuesOnRandomPrograms) {
  size_t before = 0, after = 0;
  for (uint64_t seed = 0; seed < 2500; ++seed) {
    std::mt19937_64 rng(seed);
    testing::RandomProgramOptions opt;
    opt.max_depth = 3 + static_cast<int>(seed % 4);
    AttentionProgram p = testing::random_attention_program(rng, opt);
    LossProgram l = testing::random_loss_program(rng, opt);
    AttentionProgram ps = simplify(p);
    LossProgram ls = simplify(l);
    before += ir::dag_size(p.mask) + ir::dag_size(p.score) + ir::dag_size(l.logit);
    after += ir::dag_size(ps.mask) + ir::dag_size(ps.score) + ir::dag_size(ls.logit);
    testing::RandomBindings ab(rng, p.buffers, p.params), lb(rng, l.buffers, l.params);
    expect_same_values(p.mask, ps.mask, ab, rng, FloatPrecision::F32, 12);
    expect_same_values(p.score, ps.score, ab, rng, FloatPrecision::F32, 12);
    expect_same_values(l.logit, ls.logit, lb, rng, FloatPrecision::F32, 12);
    if (HasFatalFailure()) return;
  }
  EXPECT_LT(after, before);  // it does something
}

// Without float constants nothing is rounded by folding, so the fp64 reference agrees exactly.
TEST(Simplify, PreservesFp64ValuesWhenNoFloatIsFolded) {
  int checked = 0;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    std::mt19937_64 rng(seed);
    testing::RandomProgramOptions opt;
    opt.use_transcendentals = false;
    AttentionProgram p = testing::random_attention_program(rng, opt);
    bool has_float_const = false;
    for (const Expr& e : {p.mask, p.score})
      ir::visit_post_order(e, [&](const Expr& n) {
        has_float_const |=
            n.op() == Op::ConstFloat || (n.op() == Op::Cast && n.type() == Type::F32);
      });
    if (has_float_const) continue;
    ++checked;
    AttentionProgram ps = simplify(p);
    testing::RandomBindings ab(rng, p.buffers, p.params);
    expect_same_values(p.mask, ps.mask, ab, rng, FloatPrecision::F64, 8);
    expect_same_values(p.score, ps.score, ab, rng, FloatPrecision::F64, 8);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(checked, 20);
}

TEST(Simplify, IsIdempotent) {
  for (uint64_t seed = 0; seed < 500; ++seed) {
    std::mt19937_64 rng(seed);
    AttentionProgram p = simplify(testing::random_attention_program(rng));
    EXPECT_TRUE(simplify(p.mask).same_as(p.mask)) << print_expr(p.mask);
    EXPECT_TRUE(simplify(p.score).same_as(p.score)) << print_expr(p.score);
  }
}

void expect_simplifies(const Expr& in, const Expr& want) {
  Expr got = simplify(in);
  EXPECT_TRUE(got.same_as(want)) << print_expr(in) << "\n  gave " << print_expr(got) << "\n  want "
                                 << print_expr(want);
}
void expect_kept(const Expr& in) { expect_simplifies(in, in); }

constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
constexpr int32_t kMin = std::numeric_limits<int32_t>::min();

TEST(Simplify, FoldsConstantsWithIrSemantics) {
  expect_simplifies(lit(2) + 3, lit(5));
  expect_simplifies(lit(kMax) + 1, lit(kMin));
  expect_simplifies(lit(7) / 0, lit(0));
  expect_simplifies(lit(-7) / 2, lit(-3));
  expect_simplifies(lit(-7) % 2, lit(-1));
  expect_simplifies(lit(kMin) / -1, lit(kMin));
  expect_simplifies(i32(lit(1e10)), lit(kMax));
  expect_simplifies(i32(lit(std::numeric_limits<double>::quiet_NaN())), lit(0));
  expect_simplifies(f32(lit(16777217)), lit(16777216.0));  // rounded to f32
  expect_simplifies(lit(0.1) + 0.2, lit(static_cast<double>(0.1f + 0.2f)));
  expect_simplifies(exp(lit(0.0)), lit(1.0));
  expect_simplifies(lit(1.0) / 0.0, lit(std::numeric_limits<double>::infinity()));
  expect_simplifies(lit(1) < 2, lit(true));
  expect_simplifies(select(lit(3) > 2, q, kv), q);
  expect_simplifies((lit(2) + 3) * q, q * 5);
}

TEST(Simplify, IntegerIdentities) {
  expect_simplifies(q + 0, q);
  expect_simplifies(0 + q, q);
  expect_simplifies((q + 1) + 2, q + 3);
  expect_simplifies((q - 1) + 1, q);
  expect_simplifies(q + (-4), q - 4);
  expect_simplifies(q - kv + kv, q);
  expect_simplifies(q - q, lit(0));
  expect_simplifies(q * 1, q);
  expect_simplifies(q * 0, lit(0));
  expect_simplifies(q * -1, -q);
  expect_simplifies((q * 2) * 3, q * 6);
  expect_simplifies(q / 1, q);
  expect_simplifies(q / 0, lit(0));
  expect_simplifies(q % 1, lit(0));
  expect_simplifies(q % q, lit(0));
  expect_simplifies(-(-q), q);
  expect_simplifies(-(q - kv), kv - q);
  expect_simplifies(min(q, q), q);
  expect_simplifies(max(q, kMin), q);
  expect_simplifies(min(min(q, 5), 3), min(q, 3));
  expect_simplifies(min(q, max(q, kv)), q);
  expect_simplifies(abs(-q), abs(q));
  expect_simplifies(q == q, lit(true));
  expect_simplifies(q < q, lit(false));
  expect_simplifies(q >= q, lit(true));
  expect_simplifies(!(q < kv), q >= kv);
  expect_kept(q / kv);
  expect_kept((-q) / (-kv));  // not q / kv: INT_MIN / 2 differs
}

TEST(Simplify, FloatIdentitiesAreExactOnly) {
  expect_simplifies(score * 1.0, score);
  expect_simplifies(score * -1.0, -score);
  expect_simplifies(score / 1.0, score);
  expect_simplifies(score + (-0.0), score);
  expect_simplifies(score - 0.0, score);
  expect_simplifies(lit(-0.0) - score, -score);
  expect_simplifies(-(-score), score);
  expect_simplifies(score + -lit(2.0) * 1.0, score - 2.0);
  expect_simplifies(min(score, score), score);
  expect_simplifies(!(score == 1.0), score != 1.0);
  expect_simplifies((-score) * (-score), score * score);
  expect_kept(score + 0.0);       // -0.0 + 0.0 is +0.0
  expect_kept(lit(0.0) - score);  // 0.0 - 0.0 is +0.0, -(0.0) is -0.0
  expect_kept(score - score);     // NaN, inf
  expect_kept(score * 0.0);       // NaN, inf, -0.0
  expect_kept(score == score);    // NaN
  expect_kept(!(score < 1.0));    // NaN: not score >= 1.0
  expect_kept(-(score - 1.0));    // -(+0.0) is not 1.0 - 1.0
  expect_kept(min(score, lit(std::numeric_limits<double>::infinity())));  // NaN
  expect_kept((score + 1.0) + 2.0);  // no re-association in f32
}

TEST(Simplify, BooleanAndSelectIdentities) {
  Expr c = q >= kv, d = b == 0;
  expect_simplifies(c && true, c);
  expect_simplifies(lit(true) && c, c);
  expect_simplifies(c && false, lit(false));
  expect_simplifies(c || true, lit(true));
  expect_simplifies(c || false, c);
  expect_simplifies(c && c, c);
  expect_simplifies(c || !c, lit(true));
  expect_simplifies(c && !c, lit(false));
  expect_simplifies(!!d, d);
  expect_simplifies(c == lit(true), c);
  expect_simplifies(c == lit(false), q < kv);
  expect_simplifies(c != lit(false), c);
  expect_simplifies(lit(true) != c, q < kv);
  expect_simplifies(q < kv || q >= kv, lit(true));
  expect_simplifies(q == kv && q != kv, lit(false));
  expect_simplifies(score == 1.0 && score != 1.0, lit(false));
  expect_kept(score < 1.0 || score >= 1.0);  // NaN
  expect_simplifies(select(c, score, score), score);
  expect_simplifies(select(lit(true), score, lit(1.0)), score);
  expect_simplifies(select(!(score < 1.0), q, kv), select(score < 1.0, kv, q));
  expect_simplifies(select(c, lit(true), lit(false)), c);
  expect_simplifies(select(c, lit(false), lit(true)), q < kv);
  expect_simplifies(select(c, lit(true), d), c || d);
  expect_simplifies(select(c, d, lit(false)), c && d);
  expect_simplifies(select(c, select(c, q, h), kv), select(c, q, kv));
  expect_simplifies(i32(f32(c)), i32(c));
  expect_simplifies(cast(Type::Bool, i32(c)), c);
  expect_simplifies(cast(Type::Bool, f32(q)), cast(Type::Bool, q));
}

TEST(Simplify, KeepsDeclarationsOfPrograms) {
  AttentionProgram p;
  p.name = "demo";
  p.buffers.push_back({"doc", ElemType::I32, {"B", "S"}});
  p.params.push_back({"cap", Type::F32});
  p.mask = (q >= kv) && true;
  p.score = score * 1.0;
  AttentionProgram s = simplify(p);
  EXPECT_EQ(s.buffers.size(), 1u);
  EXPECT_EQ(s.params.size(), 1u);
  EXPECT_TRUE(s.mask.same_as(q >= kv));
  EXPECT_TRUE(s.score.same_as(score));
  LossProgram l;
  l.name = "loss";
  l.logit = logit + -0.0;
  EXPECT_TRUE(simplify(l).logit.same_as(logit));
}

}  // namespace
}  // namespace tilejit
