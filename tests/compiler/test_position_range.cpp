// PositionRange: the ranges of i32 expressions over positions below kPositionLimit, the casts
// the code generator may convert without the conversion unit, and the conversion's identity
// itself, checked on every value it is used for.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>

#include "compiler/codegen/PositionRange.h"
#include "dsl/TextForm.h"

namespace tilejit::testing {
namespace {

Expr score_of(const char* text) { return parse_attention(text).score; }

// The f32 cast inside `score = score + f32(...)`.
Expr cast_in(const Expr& score) {
  Expr e = score;
  while (e.op() != Op::Cast) e = e.arg(e.num_args() - 1);
  return e;
}

TEST(PositionRange, RangesOfIndexExpressions) {
  constexpr int64_t P = kPositionLimit;
  auto range = [](const char* body) {
    return position_range(cast_in(score_of(body)).arg(0));
  };
  auto r = range("attention a {\nscore = score + f32(kv - q)\n}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, -(P - 1));
  EXPECT_EQ(r->hi, P - 1);
  r = range("attention a {\nscore = score + f32(max(q - kv, 0) * 2 + h)\n}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, 0);
  EXPECT_EQ(r->hi, 2 * (P - 1) + P - 1);
  r = range("attention a {\nscore = score + f32(-(q + 3))\n}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lo, -(P + 2));
  EXPECT_EQ(r->hi, -3);
  // Anything not known from the positions alone, or that could wrap: no range.
  EXPECT_FALSE(range("attention a {\nparam w : i32\nscore = score + f32(kv - w)\n}"));
  EXPECT_FALSE(range("attention a {\nbuffer o : i32[S]\nscore = score + f32(o[kv] - q)\n}"));
  EXPECT_FALSE(range("attention a {\nscore = score + f32(q / 2)\n}"));
  EXPECT_FALSE(range("attention a {\nscore = score + f32(q * kv)\n}"));  // up to 2^44: wraps
}

TEST(PositionRange, OnlyCastsWithinTwoToThe22AreSmall) {
  EXPECT_TRUE(small_int_to_float(cast_in(score_of("attention a {\nscore = score + f32(kv - q)\n}"))));
  EXPECT_TRUE(small_int_to_float(cast_in(score_of("attention a {\nscore = score + f32(q + 1)\n}"))));
  EXPECT_FALSE(small_int_to_float(cast_in(score_of("attention a {\nscore = score + f32(q * 2)\n}"))));
  EXPECT_FALSE(small_int_to_float(cast_in(score_of("attention a {\nscore = score + f32(q + kv)\n}"))));
}

// tj_i2f_small's identity (kernels_templates/common.cuh): the bits of 1.5 * 2^23 plus x, minus
// 1.5 * 2^23, is (float)x bit for bit on the whole range it is used for.
TEST(PositionRange, SmallConversionIsExactOnItsRange) {
  for (int32_t x = -(1 << 22); x <= (1 << 22); ++x) {
    const float got = std::bit_cast<float>(0x4B400000 + x) - 12582912.0f;
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(static_cast<float>(x))) << x;
  }
}

}  // namespace
}  // namespace tilejit::testing
