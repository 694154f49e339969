// Text form round trips: example files against the builders, printer against parser.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <random>
#include <set>

#include "compiler/Printer.h"
#include "dsl/Builders.h"
#include "dsl/Expr.h"
#include "dsl/Stdlib.h"
#include "dsl/TextForm.h"
#include "tests/support/RandomProgram.h"
#include "tests/support/SourceTree.h"

namespace tilejit {
namespace {

using namespace dsl;

std::string example_path(const std::string& name) {
  return tilejit::testing::examples_dir() + "/" + name + ".tj";
}

void expect_same(const AttentionProgram& a, const AttentionProgram& b) {
  EXPECT_EQ(print_program(a), print_program(b));
  EXPECT_TRUE(a.mask.same_as(b.mask)) << a.name;
  EXPECT_TRUE(a.score.same_as(b.score)) << a.name;
}

void expect_same(const LossProgram& a, const LossProgram& b) {
  EXPECT_EQ(print_program(a), print_program(b));
  EXPECT_TRUE(a.logit.same_as(b.logit)) << a.name;
}

template <typename P>
void expect_round_trip(const P& p) {
  std::string text = print_program(p);
  ParsedProgram parsed = parse_program(text, p.name + ".tj");
  ASSERT_TRUE(std::holds_alternative<P>(parsed)) << text;
  expect_same(std::get<P>(parsed), p);
}

TEST(TextForm, ExampleFilesParseToTheStandardAttentionPrograms) {
  for (const AttentionProgram& p : stdlib::standard_attention_programs()) {
    SCOPED_TRACE(p.name);
    ParsedProgram parsed = load_program(example_path(p.name));
    ASSERT_TRUE(std::holds_alternative<AttentionProgram>(parsed));
    expect_same(std::get<AttentionProgram>(parsed), p);
    expect_round_trip(p);
  }
}

TEST(TextForm, ExampleFilesParseToTheStandardLossPrograms) {
  for (const LossProgram& p : stdlib::standard_loss_programs()) {
    SCOPED_TRACE(p.name);
    ParsedProgram parsed = load_program(example_path(p.name));
    ASSERT_TRUE(std::holds_alternative<LossProgram>(parsed));
    expect_same(std::get<LossProgram>(parsed), p);
    expect_round_trip(p);
  }
}

TEST(TextForm, EveryExampleFileIsAStandardProgram) {
  std::set<std::string> names;
  for (const auto& p : stdlib::standard_attention_programs()) names.insert(p.name);
  for (const auto& p : stdlib::standard_loss_programs()) names.insert(p.name);
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tilejit::testing::examples_dir())) {
    if (entry.path().extension() != ".tj") continue;
    ++files;
    EXPECT_TRUE(names.count(entry.path().stem().string())) << entry.path();
  }
  EXPECT_EQ(files, names.size());
}

TEST(TextForm, DesignExampleReadsAsWritten) {
  AttentionProgram p = parse_attention(R"(
attention doc_softcap {                      # examples/programs/doc_softcap.tj
  buffer doc : i32[B, S]                      # captured: bound at launch, never baked in
  param  cap : f32
  mask   = doc[b, q] == doc[b, kv] && q >= kv
  score  = cap * tanh(score / cap)
}
)");
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  Param cap("cap", Type::F32);
  EXPECT_TRUE(p.mask.same_as(doc(b, q) == doc(b, kv) && q >= kv));
  EXPECT_TRUE(p.score.same_as(cap * tanh(score / cap)));
  ASSERT_EQ(p.buffers.size(), 1u);
  EXPECT_EQ(p.buffers[0].dims, (std::vector<std::string>{"B", "S"}));
}

TEST(TextForm, DefaultsAndOneLineForm) {
  AttentionProgram a = parse_attention("attention full {}");
  EXPECT_TRUE(a.mask.same_as(lit(true)));
  EXPECT_TRUE(a.score.same_as(score));
  LossProgram l = parse_loss("loss plain { segment v : [0, 10) weight W bias c }");
  EXPECT_TRUE(l.logit.same_as(logit));
  EXPECT_EQ(l.ignore_index, -100);
  EXPECT_EQ(l.reduction, Reduction::Mean);
  EXPECT_EQ(l.segments[0].bias, "c");
  EXPECT_FALSE(l.kl.has_value());
}

TEST(TextForm, WrongKindIsAUserError) {
  EXPECT_THROW(parse_loss("attention a {}"), UserError);
  EXPECT_THROW(parse_attention("loss l { segment v : [0, 10) weight W }"), UserError);
  EXPECT_THROW(load_program("/nonexistent/dir/x.tj"), UserError);
}

TEST(TextForm, NewlinesInsideParenthesesAreSpace) {
  AttentionProgram p = parse_attention("attention w {\n  mask = (q >= kv &&\n    q - kv < 5)\n}\n");
  EXPECT_TRUE(p.mask.same_as(q >= kv && q - kv < 5));
}

// Parses `text` as a score expression and checks it is exactly `want`, and that the printed
// form of `want` parses back to the same node.
void expect_score(const std::string& text, const Expr& want) {
  SCOPED_TRACE(text);
  std::string prog = "attention t {\n  param p : f32\n  param n : i32\n  score = " + text + "\n}\n";
  EXPECT_TRUE(parse_attention(prog).score.same_as(want)) << print_expr(parse_attention(prog).score);
  std::string printed =
      "attention t {\n  param p : f32\n  param n : i32\n  score = " + print_expr(want) + "\n}\n";
  EXPECT_TRUE(parse_attention(printed).score.same_as(want)) << print_expr(want);
}

TEST(TextForm, TrickyLiteralsRoundTrip) {
  const double inf = std::numeric_limits<double>::infinity();
  const double values[] = {0.0,
                           -0.0,
                           1.5,
                           -1.5,
                           inf,
                           -inf,
                           std::numeric_limits<double>::quiet_NaN(),
                           1e30,
                           -1e30,
                           1e-45,
                           -1e-45,
                           1.17549435e-38,
                           3.4028234663852886e38,
                           0.1,
                           1.0 / 3.0,
                           16777217.0};
  for (double v : values) {
    Expr c = lit(v);
    SCOPED_TRACE(print_expr(c));
    expect_score("score + " + print_expr(c), score + c);
    expect_score(print_expr(c) + " * score", c * score);
    expect_score("-(" + print_expr(c) + ")", -c);
    expect_score("score - " + print_expr(c), score - c);
  }
  const int ints[] = {
      0, 1, -1, 7, -7, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  for (int v : ints) {
    Expr c = lit(v);
    SCOPED_TRACE(v);
    expect_score("f32(n - " + print_expr(c) + ")", f32(Param("n", Type::I32) - c));
    expect_score("f32(" + print_expr(c) + " * n)", f32(c * Param("n", Type::I32)));
    expect_score("f32(-(" + print_expr(c) + "))", f32(-c));
    expect_score("f32(-(-(" + print_expr(c) + ")))", f32(-(-c)));
  }
}

TEST(TextForm, NegativeLiteralVersusNegation) {
  Param n("n", Type::I32);
  expect_score("f32(-1)", ir::make_cast(Type::F32, lit(-1)));
  expect_score("f32(-(1))", ir::make_cast(Type::F32, -lit(1)));
  expect_score("f32(- 1)", ir::make_cast(Type::F32, -lit(1)));
  expect_score("f32(n--1)", f32(n - lit(-1)));
  expect_score("f32(-2147483648)", f32(lit(std::numeric_limits<int32_t>::min())));
  expect_score("-0.0", lit(-0.0));
  expect_score("-inf", lit(-std::numeric_limits<double>::infinity()));
  expect_score("-(inf)", -lit(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(lit(-0.0).same_as(lit(0.0)));
}

TEST(TextForm, OperatorPrecedenceAndAssociativity) {
  Param p("p", Type::F32);
  Param n("n", Type::I32);
  Expr fn = f32(n);
  expect_score("score + p * 2.0", score + p * 2.0);
  expect_score("(score + p) * 2.0", (score + p) * 2.0);
  expect_score("score - p - 1.0", (score - p) - 1.0);
  expect_score("score - (p - 1.0)", score - (p - 1.0));
  expect_score("score / p / 2.0", (score / p) / 2.0);
  expect_score("score / (p / 2.0)", score / (p / 2.0));
  expect_score("f32(n % 3 * 2)", f32((n % 3) * 2));
  expect_score("f32(n % (3 * 2))", f32(n % (lit(3) * 2)));
  expect_score("-score * p", (-score) * p);
  expect_score("-(score * p)", -(score * p));
  expect_score("f32(q >= kv && kv < n || !(q == n))", f32((q >= kv && kv < n) || !(q == n)));
  expect_score("f32(q >= kv && (kv < n || q == n))", f32(q >= kv && (kv < n || q == n)));
  expect_score("f32(q < kv == kv < q)", f32((q < kv) == (kv < q)));
  expect_score("f32(q == kv == (kv == q))", f32((q == kv) == (kv == q)));
  expect_score("f32(!(!(q < kv)))", f32(!(!(q < kv))));
  expect_score("select(q >= kv, score, -inf)",
               select(q >= kv, score, lit(-std::numeric_limits<double>::infinity())));
  expect_score("min(score, p) + max(abs(score), exp2(log2(p)))",
               min(score, p) + max(abs(score), exp2(log2(p))));
  expect_score("rsqrt(sqrt(exp(log(tanh(score)))))", rsqrt(sqrt(exp(log(tanh(score))))));
  expect_score("f32(i32(score)) + f32(score) + f32(bool(q))",
               ir::make_cast(Type::F32, ir::make_cast(Type::I32, score)) +
                   ir::make_cast(Type::F32, score) +
                   ir::make_cast(Type::F32, ir::make_cast(Type::Bool, q)));
  // Promotion is the DSL's: i32 meets f32 and gets a cast.
  expect_score("score + q", score + q);
  expect_score("exp(q)", exp(q));
}

TEST(TextForm, LossFieldsRoundTrip) {
  LossProgram p = LossBuilder("odd")
                      .segment("a", 0, 3, "Wa", "ba")
                      .segment("b", 3, 7, "Wb")
                      .segment("c", 1000, 2147483647, "Wc")
                      .label_smoothing(1.0 / 3.0)
                      .z_loss(1e-300)
                      .kl(0.0, 1e-7, {{"t", 0, 7, "T", ""}, {"u", 1000, 2147483647, "U", "ub"}})
                      .ignore_index(std::numeric_limits<int64_t>::min())
                      .reduction(Reduction::None)
                      .build();
  expect_round_trip(p);
  expect_round_trip(LossBuilder("s").segment("v", 0, 1, "W").reduction(Reduction::Sum).build());
}

TEST(TextForm, RandomProgramsRoundTrip) {
  std::mt19937_64 rng(0x7e47f0);
  for (int i = 0; i < 2000 && !::testing::Test::HasFailure(); ++i) {
    AttentionProgram p = testing::random_attention_program(rng);
    SCOPED_TRACE(print_program(p));
    expect_round_trip(p);
  }
  for (int i = 0; i < 500 && !::testing::Test::HasFailure(); ++i) {
    LossProgram p = testing::random_loss_program(rng);
    SCOPED_TRACE(print_program(p));
    expect_round_trip(p);
  }
}

}  // namespace
}  // namespace tilejit
