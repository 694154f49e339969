// Symbolic derivatives against central finite differences in fp64, and exact goldens.
#include <gtest/gtest.h>

#include <cmath>

#include "compiler/Differentiate.h"
#include "compiler/Interpreter.h"
#include "compiler/Printer.h"
#include "compiler/Simplify.h"
#include "dsl/Expr.h"
#include "tests/compiler/RandomBindings.h"
#include "tests/support/RandomProgram.h"

namespace tilejit {
namespace {

using namespace tilejit::dsl;

double at(const Expr& e, EvalContext c, double s) {
  c.score = s;
  return evaluate(e, c).f;
}

double central_difference(const Expr& e, const EvalContext& c, double step) {
  return (at(e, c, c.score + step) - at(e, c, c.score - step)) / (2 * step);
}

// Whether some subexpression of f is at a singular point: not finite, or the operand of
// sqrt/rsqrt/log at 0, or a divisor at 0. There the chain rule meets inf * 0 even where f is
// locally constant (sqrt(g) with g == 0 and g' == 0), and no finite answer is the right one.
// Huge intermediates are skipped too: they would overflow f32, and in fp64 they absorb the
// difference steps (score - 1e20 does not change with score).
bool singular(const Expr& f, const EvalContext& c) {
  bool found = false;
  ir::visit_post_order(f, [&](const Expr& n) {
    if (found || n.type() != Type::F32) return;
    found = !(std::fabs(evaluate(n, c).f) < 1e8);
    Op op = n.op();
    if (op == Op::Sqrt || op == Op::Rsqrt || op == Op::Log || op == Op::Log2)
      found = found || evaluate(n.arg(0), c).f == 0;
    if (op == Op::Div || op == Op::Mod) found = found || evaluate(n.arg(1), c).f == 0;
  });
  return found;
}

// Whether f is one smooth piece over [score - h, score + h]: every i32 and bool subexpression
// (casts to i32, comparisons) keeps its value, min/max keep their choice, abs its sign and fmod
// its quotient. A jump inside the interval makes a difference quotient meaningless.
bool one_piece(const Expr& f, const EvalContext& c, double h) {
  EvalContext lo = c, hi = c;
  lo.score -= h;
  hi.score += h;
  bool same = true;
  ir::visit_post_order(f, [&](const Expr& n) {
    if (!same) return;
    auto key = [&](const EvalContext& x) -> double {
      Value v = evaluate(n, x);
      if (n.type() != Type::F32) return v.as_double();
      switch (n.op()) {
        case Op::Min:
        case Op::Max: return v.f == evaluate(n.arg(0), x).f;
        case Op::Abs: return std::signbit(evaluate(n.arg(0), x).f);
        case Op::Mod: return std::trunc(evaluate(n.arg(0), x).f / evaluate(n.arg(1), x).f);
        default: return 0;
      }
    };
    double k = key(c);
    same = key(lo) == k && key(hi) == k;
  });
  return same;
}

// Where f is smooth around the point, differences at two step sizes agree closely, and the
// derivative must agree with them. Near a kink, jump or overflow they disagree (or are not
// finite) and the point is skipped; so is a singular point.
struct FdResult {
  int checked = 0;
};

void check_against_fd(const Expr& f, const Expr& df, const EvalContext& c, FdResult& r) {
  if (singular(f, c)) return;
  double h1 = 1e-3 * std::max(1.0, std::fabs(c.score)), h2 = h1 / 2;
  double f0 = at(f, c, c.score);
  double fd1 = central_difference(f, c, h1), fd2 = central_difference(f, c, h2);
  if (!std::isfinite(f0) || !std::isfinite(fd1) || !std::isfinite(fd2)) return;
  if (!one_piece(f, c, h1)) return;
  double scale = std::max(1.0, std::fabs(fd2));
  if (std::fabs(fd1 - fd2) > 1e-6 * scale) return;
  double g = evaluate(df, c).f;
  ++r.checked;
  EXPECT_NEAR(g, fd2, 1e-4 * scale)
      << "f  = " << print_expr(f) << "\ndf = " << print_expr(df) << "\nat score = " << c.score
      << " b=" << c.b << " h=" << c.h << " q=" << c.q << " kv=" << c.kv;
}

TEST(Differentiate, MatchesFiniteDifferencesOnRandomScorePrograms) {
  FdResult r;
  int points = 0;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    std::mt19937_64 rng(seed);
    testing::RandomProgramOptions opt;
    opt.max_depth = 2 + static_cast<int>(seed % 4);
    opt.use_special_floats = seed % 2 == 0;
    AttentionProgram p = testing::random_attention_program(rng, opt);
    // The derivative's constants are folded in f32; differencing the program simplified the
    // same way (as lowering does) keeps fp64 evaluation of an unfolded constant, which may
    // differ wildly, e.g. log2(tanh(7.0)), out of the comparison.
    Expr f = simplify(p.score);
    Expr df = differentiate(f, var::score);
    ASSERT_EQ(df.type(), Type::F32);
    testing::RandomBindings bind(rng, p.buffers, p.params);
    for (int i = 0; i < 6; ++i, ++points) check_against_fd(f, df, bind.point(rng), r);
    if (HasFailure()) return;
  }
  // The filter must leave most points in: otherwise the test proves little.
  EXPECT_GT(r.checked, points / 2) << r.checked << " of " << points;
}

TEST(Differentiate, EveryRuleAgainstFiniteDifferences) {
  Param c("c", Type::F32);
  Expr s = score;
  std::vector<Expr> cases = {-s,
                             abs(s),
                             exp(s),
                             exp2(s),
                             log(s + 10.0),
                             log2(s + 10.0),
                             tanh(s),
                             sqrt(s + 10.0),
                             rsqrt(s + 10.0),
                             s + c,
                             s - c * s,
                             s * s * c,
                             s / c,
                             c / (s + 10.0),
                             s / (s * s + 1.0),
                             s % c,
                             c % (s + 10.0),
                             min(s, c),
                             max(s * 2.0, c),
                             select(s > c, s * s, exp(s)),
                             f32(i32(s)) + s,
                             s * f32(q - kv),
                             cast(Type::F32, s > 0.0) * s,
                             exp(tanh(s / c) * c)};
  FdResult r;
  for (const Expr& f : cases) {
    Expr df = differentiate(f, var::score);
    for (double x : {-3.1, -0.7, 0.45, 1.3, 2.9}) {
      EvalContext ctx;
      ctx.params["c"] = 1.7;
      ctx.q = 5, ctx.kv = 2;
      ctx.score = x;
      check_against_fd(f, df, ctx, r);
    }
  }
  EXPECT_GT(r.checked, static_cast<int>(cases.size()) * 4);
}

TEST(Differentiate, SoftcapGolden) {
  Param cap("cap", Type::F32);
  Expr f = cap * tanh(score / cap);
  Expr df = differentiate(f, var::score);
  EXPECT_EQ(print_expr(df), "cap * ((1.0 - tanh(score / cap) * tanh(score / cap)) * (1.0 / cap))");
  // 1 - tanh^2(s/c), up to the rounding of c * (1/c).
  for (double s : {-40.0, -3.0, 0.0, 0.5, 12.0, 55.0}) {
    EvalContext ctx;
    ctx.params["cap"] = 30.0;
    ctx.score = s;
    double t = std::tanh(s / 30.0);
    EXPECT_NEAR(evaluate(df, ctx).f, 1 - t * t, 1e-15) << s;
  }
}

TEST(Differentiate, AlibiGoldenIsExactlyOne) {
  Param slope("slope", Type::F32);
  Expr f = score + slope * f32(kv - q);
  Expr df = differentiate(f, var::score);
  EXPECT_TRUE(df.same_as(lit(1.0))) << print_expr(df);
  EXPECT_TRUE(differentiate(score, var::score).same_as(lit(1.0)));
}

TEST(Differentiate, ConstantsIntegersAndLoadsHaveZeroDerivative) {
  Buffer bias("bias", ElemType::F32, {"S"});
  EXPECT_TRUE(differentiate(bias(kv) * 2.0, var::score).same_as(lit(0.0)));
  EXPECT_TRUE(differentiate(lit(3.0), var::score).same_as(lit(0.0)));
  EXPECT_TRUE(differentiate(f32(q) * f32(kv), var::score).same_as(lit(0.0)));
  EXPECT_TRUE(differentiate(logit * 2.0, var::score).same_as(lit(0.0)));
  EXPECT_TRUE(differentiate(logit * 2.0, var::logit).same_as(lit(2.0)));
  EXPECT_TRUE(differentiate(f32(i32(score * 4.0)), var::score).same_as(lit(0.0)));
}

TEST(Differentiate, RuleShapes) {
  Expr s = score;
  auto d = [](const Expr& e) { return print_expr(differentiate(e, var::score)); };
  EXPECT_EQ(d(tanh(s)), "1.0 - tanh(score) * tanh(score)");
  EXPECT_EQ(d(exp(s)), "exp(score)");
  EXPECT_EQ(d(abs(s)), "select(score < 0.0, -1.0, 1.0)");
  EXPECT_EQ(d(min(s, lit(2.0))), "select(min(score, 2.0) == score, 1.0, 0.0)");
  EXPECT_EQ(d(max(lit(2.0), s)), "select(max(2.0, score) == 2.0, 0.0, 1.0)");
  EXPECT_EQ(d(select(q > kv, s * 3.0, lit(1.0))), "select(q > kv, 3.0, 0.0)");
  EXPECT_EQ(d(sqrt(s)), "0.5 / sqrt(score)");
  EXPECT_EQ(d(rsqrt(s)), "-0.5 * rsqrt(score) / score");
  EXPECT_EQ(d(log(s)), "1.0 / score");
}

}  // namespace
}  // namespace tilejit
