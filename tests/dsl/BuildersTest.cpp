// Builders and the standard library: well-formed programs build, misuse is a UserError.
#include <gtest/gtest.h>

#include <set>

#include "compiler/Error.h"
#include "compiler/Printer.h"
#include "dsl/Builders.h"
#include "dsl/Expr.h"
#include "dsl/Stdlib.h"

namespace tilejit {
namespace {

using namespace dsl;

// Expects a UserError whose message contains `fragment`.
template <typename F>
void expect_user_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error, expected: " << fragment;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Stdlib, MasksAreTheDocumentedExpressions) {
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  Expr w = lit(128), c = lit(64), s = lit(10), e = lit(20);
  EXPECT_EQ(print_expr(stdlib::causal()), "q >= kv");
  EXPECT_EQ(print_expr(stdlib::sliding_window(w)), "q >= kv && q - kv < 128");
  EXPECT_EQ(print_expr(stdlib::prefix_lm(lit(5))), "kv < 5 || q >= kv");
  EXPECT_EQ(print_expr(stdlib::document(doc)), "doc[b, q] == doc[b, kv]");
  EXPECT_EQ(print_expr(stdlib::chunked(c)), "q / 64 == kv / 64");
  EXPECT_EQ(print_expr(stdlib::image_block_or_causal(s, e)),
            "q >= kv || q >= 10 && q < 20 && kv >= 10 && kv < 20");
  EXPECT_EQ(print_expr(stdlib::mask_not(stdlib::mask_or(stdlib::causal(), stdlib::chunked(c)))),
            "!(q >= kv || q / 64 == kv / 64)");
  EXPECT_TRUE(stdlib::mask_and(stdlib::causal(), stdlib::document(doc))
                  .same_as(q >= kv && doc(b, q) == doc(b, kv)));
}

TEST(Stdlib, ScoreModsAreTheDocumentedExpressions) {
  Buffer slopes("slopes", ElemType::F32, {"H"});
  Param cap("cap");
  EXPECT_EQ(print_expr(stdlib::alibi(slopes)), "score + slopes[h] * f32(kv - q)");
  EXPECT_EQ(print_expr(stdlib::softcap(cap)), "cap * tanh(score / cap)");
  EXPECT_EQ(print_expr(stdlib::softcap(lit(30.0), logit)), "30.0 * tanh(logit / 30.0)");
}

TEST(Stdlib, StandardProgramsHaveDistinctNames) {
  std::set<std::string> names;
  for (const auto& p : stdlib::standard_attention_programs())
    EXPECT_TRUE(names.insert(p.name).second);
  for (const auto& p : stdlib::standard_loss_programs()) EXPECT_TRUE(names.insert(p.name).second);
  EXPECT_EQ(names.size(), 13u);
}

TEST(Builders, AttentionProgramCarriesWhatWasGiven) {
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  Param cap("cap");
  AttentionProgram p = AttentionBuilder("doc_softcap")
                           .buffer(doc)
                           .param(cap)
                           .mask(stdlib::document(doc) && q >= kv)
                           .score(stdlib::softcap(cap))
                           .build();
  EXPECT_EQ(p.name, "doc_softcap");
  ASSERT_EQ(p.buffers.size(), 1u);
  EXPECT_EQ(p.buffers[0].elem, ElemType::I32);
  ASSERT_EQ(p.params.size(), 1u);
  EXPECT_EQ(p.params[0].type, Type::F32);
  EXPECT_EQ(AttentionBuilder("plain").build().mask.op(), Op::ConstBool);
}

TEST(Builders, LossProgramCarriesWhatWasGiven) {
  LossProgram p = LossBuilder("two")
                      .segment("base", 0, 100, "W")
                      .segment("extra", 120, 130, "X", "xb")
                      .label_smoothing(0.1)
                      .z_loss(1e-4)
                      .kl(0.5, 2.0)
                      .ignore_index(-1)
                      .reduction(Reduction::Sum)
                      .build();
  EXPECT_EQ(p.live_ids(), 110);
  EXPECT_EQ(p.vocab_end(), 130);
  ASSERT_TRUE(p.kl.has_value());
  EXPECT_EQ(p.kl->temperature, 2.0);
  EXPECT_TRUE(p.kl->teacher_segments.empty());
  EXPECT_EQ(p.segments[1].bias, "xb");
}

TEST(DslMisuse, OperatorTypeErrorsAreUserErrors) {
  expect_user_error([] { return q && kv; }, "operator '&&' needs bool");
  expect_user_error([] { return (q < kv) + 1; }, "operator '+' needs numeric");
  expect_user_error([] { return !q; }, "operator '!' needs bool");
  expect_user_error([] { return select(q, kv, kv); }, "bool condition");
  expect_user_error([] { return -(q < kv); }, "numeric");
  expect_user_error([] { return exp(q < kv); }, "numeric");
  expect_user_error([] { return (q < kv) == 1; }, "two numeric or two bool");
  expect_user_error([] { return q + Expr(); }, "undefined");
  expect_user_error([] { return lit(int64_t{1} << 40); }, "does not fit in i32");
}

TEST(DslMisuse, BufferAndParamMisuseAreUserErrors) {
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  expect_user_error([&] { return doc(b); }, "has 2 dimensions but is indexed with 1");
  expect_user_error([&] { return doc(b, score); }, "must be i32");
  expect_user_error([] { return Buffer("x", ElemType::F32, {}); }, "at least one dimension");
  expect_user_error([] { return Param("p", Type::Bool); }, "f32 or i32");
}

TEST(BuilderChecks, AttentionMisuseIsAUserErrorNamingTheProgram) {
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  Buffer doc1("doc", ElemType::I32, {"S"});
  Param cap("cap");
  expect_user_error([&] { AttentionBuilder("a").mask(doc(b, q) == 0).build(); },
                    "program 'a': mask: buffer 'doc' is not declared");
  expect_user_error([&] { AttentionBuilder("a").buffer(doc1).mask(doc(b, q) == 0).build(); },
                    "has 1 dimensions but");
  expect_user_error(
      [&] {
        AttentionBuilder("a")
            .buffer(BufferDecl{"doc", ElemType::F32, {"B", "S"}})
            .mask(doc(b, q) == 0)
            .build();
      },
      "holds f32");
  expect_user_error([&] { AttentionBuilder("a").score(score * cap).build(); },
                    "param 'cap' is not declared");
  expect_user_error(
      [&] {
        AttentionBuilder("a").param(ParamDecl{"cap", Type::I32}).score(score * cap).build();
      },
      "declared i32 but used as f32");
  expect_user_error([] { AttentionBuilder("a").mask(score > 0.0).build(); },
                    "mask: variable 'score' is not available");
  expect_user_error([] { AttentionBuilder("a").mask(row == 0).build(); },
                    "variable 'row' is not available");
  expect_user_error([] { AttentionBuilder("a").mask(q - kv).build(); }, "mask must be bool");
  expect_user_error([] { AttentionBuilder("a").score(q - kv).build(); }, "score must be f32");
  expect_user_error([] { AttentionBuilder("a").mask(Expr()).build(); }, "mask is not set");
  expect_user_error([&] { AttentionBuilder("a").buffer(doc).buffer(doc).build(); },
                    "'doc' is declared twice");
  expect_user_error(
      [] {
        AttentionBuilder("a").param(ParamDecl{"q", Type::I32}).build();
      },
      "reserved");
  expect_user_error(
      [] {
        AttentionBuilder("a").param(ParamDecl{"select", Type::I32}).build();
      },
      "reserved");
  expect_user_error([] { AttentionBuilder("a b").build(); }, "not an identifier");
  expect_user_error(
      [] {
        AttentionBuilder("a").buffer(BufferDecl{"x", ElemType::I32, {"1B"}}).build();
      },
      "has a dimension named '1B'");
}

TEST(BuilderChecks, LossMisuseIsAUserErrorNamingTheProgram) {
  expect_user_error([] { LossBuilder("l").build(); }, "program 'l': the layout has no segments");
  expect_user_error([] { LossBuilder("l").segment("a", 5, 5, "W").build(); }, "is empty");
  expect_user_error([] { LossBuilder("l").segment("a", -1, 5, "W").build(); }, "begins at -1 < 0");
  expect_user_error(
      [] { LossBuilder("l").segment("a", 0, 10, "W").segment("b", 5, 20, "X").build(); },
      "overlap");
  expect_user_error(
      [] { LossBuilder("l").segment("a", 0, 10, "W").segment("a", 10, 20, "X").build(); },
      "is used twice");
  expect_user_error([] { LossBuilder("l").segment("a", 0, 10, "").build(); },
                    "has no valid weight name");
  expect_user_error([] { LossBuilder("l").segment("a", 0, 10, "W").logit(logit * f32(q)).build(); },
                    "logit: variable 'q' is not available");
  expect_user_error([] { LossBuilder("l").segment("a", 0, 10, "W").label_smoothing(1.0).build(); },
                    "label_smoothing");
  expect_user_error([] { LossBuilder("l").segment("a", 0, 10, "W").z_loss(-1).build(); }, "z_loss");
  expect_user_error([] { LossBuilder("l").segment("a", 0, 10, "W").kl(1.5, 1).build(); }, "alpha");
  expect_user_error([] { LossBuilder("l").segment("a", 0, 10, "W").kl(0.5, 0).build(); },
                    "temperature");
}

}  // namespace
}  // namespace tilejit
