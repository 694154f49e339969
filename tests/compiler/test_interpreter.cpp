// The reference interpreter against hand-computed values, and CompiledEval against it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "compiler/Error.h"
#include "compiler/Interpreter.h"
#include "compiler/Printer.h"
#include "dsl/Expr.h"
#include "tests/compiler/RandomBindings.h"
#include "tests/support/RandomProgram.h"

namespace tilejit {
namespace {

using namespace tilejit::dsl;
constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

int32_t ival(const Expr& e, const EvalContext& c = {}) {
  Value v = evaluate(e, c);
  EXPECT_EQ(v.type, Type::I32) << print_expr(e);
  return v.i;
}
double fval(const Expr& e, const EvalContext& c = {}) {
  Value v = evaluate(e, c);
  EXPECT_EQ(v.type, Type::F32) << print_expr(e);
  return v.f;
}
bool bval(const Expr& e, const EvalContext& c = {}) {
  Value v = evaluate(e, c);
  EXPECT_EQ(v.type, Type::Bool) << print_expr(e);
  return v.b;
}

TEST(Interpreter, ConstantsAndVariables) {
  EvalContext c;
  c.b = 1, c.h = 2, c.q = 3, c.kv = 4, c.row = 5, c.id = 6, c.score = 0.1, c.logit = -2.5;
  EXPECT_EQ(ival(lit(7)), 7);
  EXPECT_TRUE(bval(lit(true)));
  EXPECT_EQ(fval(lit(0.5)), 0.5);
  EXPECT_EQ(ival(b * 1000 + h * 100 + q * 10 + kv, c), 1234);
  EXPECT_EQ(ival(row * 10 + id, c), 56);
  EXPECT_EQ(fval(score, c), 0.1);  // fp64 reference: the value as given
  EXPECT_EQ(fval(logit, c), -2.5);
  c.precision = FloatPrecision::F32;
  EXPECT_EQ(fval(score, c), static_cast<double>(0.1f));
}

TEST(Interpreter, Params) {
  EvalContext c;
  c.params["cap"] = 0.1;
  c.params["n"] = int64_t{42};
  c.params["wide"] = int64_t{kMax} + 1;
  EXPECT_EQ(fval(Param("cap", Type::F32), c), static_cast<double>(0.1f));  // an f32 param is f32
  EXPECT_EQ(ival(Param("n", Type::I32), c), 42);
  EXPECT_EQ(ival(Param("wide", Type::I32), c), kMin);
  EXPECT_THROW(evaluate(Param("missing", Type::F32), c), UserError);
  c.params["n"] = 1.5;
  EXPECT_THROW(evaluate(Param("n", Type::I32), c), UserError);
}

TEST(Interpreter, IntegerArithmeticWraps) {
  EXPECT_EQ(ival(lit(kMax) + 1), kMin);
  EXPECT_EQ(ival(lit(kMin) - 1), kMax);
  EXPECT_EQ(ival(lit(65536) * 65536), 0);
  EXPECT_EQ(ival(lit(kMax) * 2), -2);
  EXPECT_EQ(ival(-lit(kMin)), kMin);
  EXPECT_EQ(ival(abs(lit(kMin))), kMin);
  EXPECT_EQ(ival(abs(lit(-5))), 5);
  EXPECT_EQ(ival(-lit(5)), -5);
  EXPECT_EQ(ival(min(lit(-3), 2)), -3);
  EXPECT_EQ(ival(max(lit(-3), 2)), 2);
}

TEST(Interpreter, IntegerDivisionTruncatesAndDivisionByZeroIsZero) {
  EXPECT_EQ(ival(lit(7) / 2), 3);
  EXPECT_EQ(ival(lit(-7) / 2), -3);
  EXPECT_EQ(ival(lit(7) / -2), -3);
  EXPECT_EQ(ival(lit(-7) / -2), 3);
  EXPECT_EQ(ival(lit(7) / 0), 0);
  EXPECT_EQ(ival(lit(kMin) / -1), kMin);
  EXPECT_EQ(ival(lit(-7) % 2), -1);
  EXPECT_EQ(ival(lit(7) % -2), 1);
  EXPECT_EQ(ival(lit(-7) % -2), -1);
  EXPECT_EQ(ival(lit(7) % 0), 0);
  EXPECT_EQ(ival(lit(kMin) % -1), 0);
}

TEST(Interpreter, FloatArithmetic) {
  EXPECT_EQ(fval(lit(1.5) + 2.25), 3.75);
  EXPECT_EQ(fval(lit(1.5) - 2.25), -0.75);
  EXPECT_EQ(fval(lit(1.5) * -2.0), -3.0);
  EXPECT_EQ(fval(lit(1.0) / 0.0), kInf);
  EXPECT_TRUE(std::isnan(fval(lit(0.0) / 0.0)));
  EXPECT_EQ(fval(lit(-7.5) % 2.0), -1.5);  // fmod: sign of the dividend
  EXPECT_EQ(fval(lit(7.5) % -2.0), 1.5);
  EXPECT_TRUE(std::isnan(fval(lit(1.0) % 0.0)));
  EXPECT_EQ(fval(-lit(0.0)), 0.0);
  EXPECT_TRUE(std::signbit(fval(-lit(0.0))));
  EXPECT_EQ(fval(abs(lit(-2.5))), 2.5);
  EXPECT_EQ(fval(min(lit(kNaN), 1.0)), 1.0);  // fmin: NaN yields the other operand
  EXPECT_EQ(fval(max(lit(2.0), kNaN)), 2.0);
  EXPECT_EQ(fval(min(lit(-1.0), 2.0)), -1.0);
  EXPECT_EQ(fval(max(lit(-1.0), 2.0)), 2.0);
  EXPECT_EQ(fval(lit(3) + lit(0.5)), 3.5);  // promoted i32
}

TEST(Interpreter, Transcendentals) {
  EXPECT_DOUBLE_EQ(fval(exp(lit(1.0))), std::exp(1.0));
  EXPECT_EQ(fval(exp2(lit(3.0))), 8.0);
  EXPECT_DOUBLE_EQ(fval(log(lit(2.0))), std::log(2.0));
  EXPECT_EQ(fval(log(lit(0.0))), -kInf);
  EXPECT_TRUE(std::isnan(fval(log(lit(-1.0)))));
  EXPECT_EQ(fval(log2(lit(8.0))), 3.0);
  EXPECT_DOUBLE_EQ(fval(tanh(lit(0.5))), std::tanh(0.5));
  EXPECT_EQ(fval(tanh(lit(kInf))), 1.0);
  EXPECT_DOUBLE_EQ(fval(sqrt(lit(2.0))), std::sqrt(2.0));
  EXPECT_TRUE(std::isnan(fval(sqrt(lit(-1.0)))));
  EXPECT_EQ(fval(rsqrt(lit(4.0))), 0.5);
  EXPECT_EQ(fval(rsqrt(lit(0.0))), kInf);
  EXPECT_EQ(fval(exp(lit(2))), std::exp(2.0));  // i32 operand promoted
}

TEST(Interpreter, F32PrecisionRoundsEveryOperation) {
  Expr tiny = lit(std::ldexp(1.0, -30));
  Expr e = lit(1.0) + tiny;
  EXPECT_EQ(fval(e), 1.0 + std::ldexp(1.0, -30));
  EvalContext c;
  c.precision = FloatPrecision::F32;
  EXPECT_EQ(fval(e, c), 1.0);
  EXPECT_EQ(fval((lit(1.0) + tiny) - 1.0, c), 0.0);
  EXPECT_EQ(fval(exp(lit(1.0)), c), static_cast<double>(static_cast<float>(std::exp(1.0))));
  EXPECT_EQ(fval(f32(lit(16777217)), c), 16777216.0);
  EXPECT_EQ(fval(f32(lit(16777217))), 16777217.0);
}

TEST(Interpreter, CastsSaturateAndTruncate) {
  EXPECT_EQ(ival(i32(lit(3.7))), 3);
  EXPECT_EQ(ival(i32(lit(-3.7))), -3);
  EXPECT_EQ(ival(i32(lit(1e10))), kMax);
  EXPECT_EQ(ival(i32(lit(-1e10))), kMin);
  EXPECT_EQ(ival(i32(lit(kInf))), kMax);
  EXPECT_EQ(ival(i32(lit(-kInf))), kMin);
  EXPECT_EQ(ival(i32(lit(kNaN))), 0);
  EXPECT_EQ(ival(i32(lit(2147483648.0))), kMax);
  EXPECT_EQ(ival(i32(lit(-2147483648.0))), kMin);
  EXPECT_EQ(ival(i32(lit(true))), 1);
  EXPECT_EQ(fval(f32(lit(false))), 0.0);
  EXPECT_EQ(fval(f32(lit(-7))), -7.0);
  EXPECT_TRUE(bval(cast(Type::Bool, lit(5))));
  EXPECT_FALSE(bval(cast(Type::Bool, lit(0))));
  EXPECT_TRUE(bval(cast(Type::Bool, lit(kNaN))));  // NaN != 0
  EXPECT_FALSE(bval(cast(Type::Bool, lit(-0.0))));
  EXPECT_TRUE(bval(cast(Type::Bool, lit(0.25))));
}

TEST(Interpreter, ComparisonsAndLogic) {
  EXPECT_TRUE(bval(lit(1) < 2));
  EXPECT_FALSE(bval(lit(2) < 2));
  EXPECT_TRUE(bval(lit(2) <= 2));
  EXPECT_TRUE(bval(lit(3) > 2));
  EXPECT_TRUE(bval(lit(2) >= 2));
  EXPECT_TRUE(bval(lit(2) == 2));
  EXPECT_TRUE(bval(lit(2) != 3));
  EXPECT_FALSE(bval(lit(kNaN) == kNaN));
  EXPECT_TRUE(bval(lit(kNaN) != kNaN));
  EXPECT_FALSE(bval(lit(kNaN) < 1.0));
  EXPECT_FALSE(bval(lit(kNaN) >= 1.0));
  EXPECT_TRUE(bval(lit(-0.0) == 0.0));
  EXPECT_TRUE(bval(lit(true) == lit(true)));
  EXPECT_TRUE(bval(lit(true) != lit(false)));
  EXPECT_FALSE(bval(lit(true) && false));
  EXPECT_TRUE(bval(lit(false) || true));
  EXPECT_TRUE(bval(!lit(false)));
  EXPECT_EQ(ival(select(lit(true), lit(1), lit(2))), 1);
  EXPECT_EQ(fval(select(lit(false), lit(1.0), lit(2.0))), 2.0);
}

TEST(Interpreter, SelectEvaluatesOnlyTheChosenOperand) {
  // The unchosen operand reads a buffer that is not bound: evaluating it would throw.
  Buffer missing("missing", ElemType::I32, {"S"});
  EvalContext c;
  c.q = 1;
  EXPECT_EQ(ival(select(q > 0, lit(5), missing(q)), c), 5);
  EXPECT_THROW(evaluate(select(q < 0, lit(5), missing(q)), c), UserError);
}

TEST(Interpreter, LoadsRespectShapeStridesAndRange) {
  int32_t data[6] = {0, 1, 2, 3, 4, 5};
  Buffer m("m", ElemType::I32, {"R", "C"});
  EvalContext c;
  c.buffers["m"] = {data, ElemType::I32, {2, 3}, {}};  // row-major [[0,1,2],[3,4,5]]
  EXPECT_EQ(ival(m(1, 2), c), 5);
  EXPECT_EQ(ival(m(0, 1), c), 1);
  EXPECT_EQ(ival(m(2, 0), c), 0);  // row out of range
  EXPECT_EQ(ival(m(0, 3), c), 0);  // column out of range
  EXPECT_EQ(ival(m(-1, 0), c), 0);
  EXPECT_EQ(ival(m(1, -1), c), 0);  // would alias m[0, 2] if the range were not checked
  c.buffers["m"] = {data, ElemType::I32, {2, 3}, {1, 2}};  // column-major [[0,2,4],[1,3,5]]
  EXPECT_EQ(ival(m(1, 2), c), 5);
  EXPECT_EQ(ival(m(0, 1), c), 2);
  EXPECT_EQ(ival(m(1, 0), c), 1);
  // Wrong element type or rank is the binder's mistake.
  float f[1] = {1};
  c.buffers["m"] = {f, ElemType::F32, {2, 3}, {}};
  EXPECT_THROW(evaluate(m(0, 0), c), UserError);
  c.buffers["m"] = {data, ElemType::I32, {6}, {}};
  EXPECT_THROW(evaluate(m(0, 0), c), UserError);
}

TEST(Interpreter, HalfPrecisionBuffersDecodeExactly) {
  uint16_t bf[] = {0x3F80, 0xC040, 0x7F80, 0x3E20, 0x0001};
  Buffer vb("vb", ElemType::BF16, {"N"});
  EvalContext c;
  c.buffers["vb"] = {bf, ElemType::BF16, {5}, {}};
  EXPECT_EQ(fval(vb(0), c), 1.0);
  EXPECT_EQ(fval(vb(1), c), -3.0);
  EXPECT_EQ(fval(vb(2), c), kInf);
  EXPECT_EQ(fval(vb(3), c), 0.15625);
  EXPECT_EQ(fval(vb(4), c), std::ldexp(1.0, -133));  // a subnormal f32
  EXPECT_EQ(fval(vb(5), c), 0.0);

  uint16_t h[] = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x8000, 0x3555};
  Buffer vh("vh", ElemType::F16, {"N"});
  c.buffers["vh"] = {h, ElemType::F16, {10}, {}};
  EXPECT_EQ(fval(vh(0), c), 1.0);
  EXPECT_EQ(fval(vh(1), c), -2.0);
  EXPECT_EQ(fval(vh(2), c), std::ldexp(1.0, -24));
  EXPECT_EQ(fval(vh(3), c), 1023 * std::ldexp(1.0, -24));
  EXPECT_EQ(fval(vh(4), c), 65504.0);
  EXPECT_EQ(fval(vh(5), c), kInf);
  EXPECT_EQ(fval(vh(6), c), -kInf);
  EXPECT_TRUE(std::isnan(fval(vh(7), c)));
  EXPECT_EQ(fval(vh(8), c), 0.0);
  EXPECT_TRUE(std::signbit(fval(vh(8), c)));
  EXPECT_EQ(fval(vh(9), c), 0.333251953125);  // (1 + 341/1024) * 2^-2
}

TEST(Interpreter, MissingBindingsAreUserErrors) {
  Buffer doc("doc", ElemType::I32, {"S"});
  EXPECT_THROW(evaluate(doc(q), {}), UserError);
  EXPECT_THROW(CompiledEval(doc(q) == 0, EvalContext{}), UserError);
}

// CompiledEval shares the semantics and must agree bit for bit, in both precisions.
TEST(CompiledEval, MatchesEvaluateOnRandomPrograms) {
  int points = 0;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    std::mt19937_64 rng(seed);
    AttentionProgram p = testing::random_attention_program(rng);
    LossProgram l = testing::random_loss_program(rng);
    testing::RandomBindings attention_bind(rng, p.buffers, p.params);
    testing::RandomBindings loss_bind(rng, l.buffers, l.params);
    for (FloatPrecision precision : {FloatPrecision::F64, FloatPrecision::F32}) {
      EvalContext ab = attention_bind.bindings(), lb = loss_bind.bindings();
      ab.precision = lb.precision = precision;
      CompiledEval mask(p.mask, ab), score(p.score, ab), logit(l.logit, lb);
      for (int i = 0; i < 8; ++i) {
        EvalContext a = attention_bind.point(rng, precision);
        EvalContext c = loss_bind.point(rng, precision);
        Value want_mask = evaluate(p.mask, a), want_score = evaluate(p.score, a);
        Value want_logit = evaluate(l.logit, c);
        ASSERT_TRUE(testing::same_value(mask.eval(a), want_mask)) << print_expr(p.mask);
        ASSERT_EQ(mask.eval_mask(a.b, a.h, a.q, a.kv), want_mask.b) << print_expr(p.mask);
        ASSERT_TRUE(testing::same_value(score.eval(a), want_score)) << print_expr(p.score);
        ASSERT_TRUE(testing::same_value(
            Value::of_float(score.eval_score(a.score, a.b, a.h, a.q, a.kv)), want_score))
            << print_expr(p.score);
        ASSERT_TRUE(testing::same_value(Value::of_float(logit.eval_logit(c.logit, c.row, c.id)),
                                        want_logit))
            << print_expr(l.logit);
        ++points;
      }
    }
  }
  EXPECT_EQ(points, 1000 * 2 * 8);
}

TEST(CompiledEval, LargeExpressionsUseHeapRegisters) {
  Expr e = score;
  for (int i = 0; i < 600; ++i) e = e * 1.001 + lit(i % 7) * kv;
  EvalContext c;
  c.kv = 3;
  c.score = 0.5;
  CompiledEval fast(e, c);
  EXPECT_TRUE(testing::same_value(fast.eval(c), evaluate(e, c)));
  EXPECT_EQ(fast.eval_score(0.5, 0, 0, 0, 3), evaluate(e, c).f);
}

}  // namespace
}  // namespace tilejit
