// Misuse is a UserError that names the program and the expression at fault; never a crash.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "compiler/Error.h"
#include "compiler/Printer.h"
#include "compiler/Validate.h"
#include "dsl/Expr.h"
#include "tests/support/RandomProgram.h"

namespace tilejit {
namespace {

using namespace tilejit::dsl;

AttentionProgram attention() {
  AttentionProgram p;
  p.name = "prog";
  p.buffers.push_back({"doc", ElemType::I32, {"B", "S"}});
  p.buffers.push_back({"bias", ElemType::BF16, {"S"}});
  p.params.push_back({"cap", Type::F32});
  p.params.push_back({"window", Type::I32});
  p.mask = Buffer("doc", ElemType::I32, {"B", "S"})(b, q) ==
               Buffer("doc", ElemType::I32, {"B", "S"})(b, kv) &&
           q - kv < Param("window", Type::I32);
  p.score = Param("cap", Type::F32) * tanh(score / Param("cap", Type::F32)) +
            Buffer("bias", ElemType::BF16, {"S"})(kv);
  return p;
}

LossProgram loss() {
  LossProgram p;
  p.name = "lossprog";
  p.params.push_back({"temp", Type::F32});
  p.segments.push_back({"base", 0, 1000, "lm_head", ""});
  p.segments.push_back({"actions", 1024, 1100, "action_head", "action_bias"});
  p.logit = logit / Param("temp", Type::F32);
  return p;
}

// Runs `f`, expecting a UserError whose message contains each of `parts`.
template <typename F>
void expect_user_error(F&& f, std::vector<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const UserError& e) {
    std::string msg = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " << part;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UserError: " << e.what();
  }
}

void expect_bad_mask(const Expr& mask, const Expr& culprit, const std::string& what) {
  AttentionProgram p = attention();
  p.mask = mask;
  expect_user_error([&] { validate(p); },
                    {"program 'prog'", "mask", "`" + print_expr(culprit) + "`", what});
}

void expect_bad_score(const Expr& score, const Expr& culprit, const std::string& what) {
  AttentionProgram p = attention();
  p.score = score;
  expect_user_error([&] { validate(p); },
                    {"program 'prog'", "score", "`" + print_expr(culprit) + "`", what});
}

TEST(Validate, AcceptsGoodPrograms) {
  EXPECT_NO_THROW(validate(attention()));
  EXPECT_NO_THROW(validate(loss()));
  AttentionProgram defaults;
  defaults.name = "defaults";
  EXPECT_NO_THROW(validate(defaults));
}

TEST(Validate, AcceptsEveryRandomProgram) {
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    std::mt19937_64 rng(seed);
    AttentionProgram p = testing::random_attention_program(rng);
    LossProgram l = testing::random_loss_program(rng);
    EXPECT_NO_THROW(validate(p)) << print_program(p);
    EXPECT_NO_THROW(validate(l)) << print_program(l);
  }
}

TEST(Validate, RandomProgramsAreDeterministicPerSeed) {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    std::mt19937_64 a(seed), b2(seed);
    EXPECT_EQ(print_program(testing::random_attention_program(a)),
              print_program(testing::random_attention_program(b2)));
    EXPECT_EQ(print_program(testing::random_loss_program(a)),
              print_program(testing::random_loss_program(b2)));
  }
}

TEST(Validate, IllTypedNodes) {
  Expr mixed = ir::make(Op::Add, {q, lit(1.5)});  // raw IR: no promotion
  expect_bad_mask(mixed > 0, mixed, "'+' needs two numeric operands of one type");
  Expr int_and = ir::make(Op::And, {q, kv});
  expect_bad_mask(int_and, int_and, "bool operands");
  Expr int_not = ir::make(Op::Not, {q});
  expect_bad_mask(int_not, int_not, "a bool operand");
  Expr int_cond = ir::make(Op::Select, {q, lit(true), lit(false)});
  expect_bad_mask(int_cond, int_cond, "a bool condition");
  Expr branches = ir::make(Op::Select, {q > kv, score, lit(1)});
  expect_bad_score(branches + 0.0, branches, "two operands of one type");
  Expr bool_lt = ir::make(Op::Lt, {q > kv, lit(true)});
  expect_bad_mask(bool_lt, bool_lt, "bools only for == and !=");
  Expr int_exp = ir::make(Op::Exp, {q});
  expect_bad_score(score + int_exp, int_exp, "an f32 operand");
  Expr neg_bool = ir::make(Op::Neg, {q > kv});
  expect_bad_mask(neg_bool, neg_bool, "a numeric operand");
  Expr bool_add = ir::make(Op::Add, {q > kv, q > kv});
  expect_bad_mask(bool_add, bool_add, "two numeric operands");
}

TEST(Validate, BadLoads) {
  Expr float_index = ir::make_load("doc", Type::I32, {b, f32(q)});
  expect_bad_mask(float_index == 0, float_index, "index 1 of 'doc' is f32");
  Expr rank = ir::make_load("doc", Type::I32, {q});
  expect_bad_mask(rank == 0, rank, "2 dimensions but is indexed with 1");
  Expr undeclared = ir::make_load("nope", Type::I32, {q});
  expect_bad_mask(undeclared == 0, undeclared, "buffer 'nope' is not declared");
  Expr wrong_type = ir::make_load("bias", Type::I32, {kv});
  expect_bad_mask(wrong_type == 0, wrong_type, "holds bf16 but is read as i32");
}

TEST(Validate, BadParamsAndVariables) {
  Expr undeclared = ir::make_param("scale", Type::F32);
  expect_bad_score(score * undeclared, undeclared, "param 'scale' is not declared");
  Expr wrong = ir::make_param("cap", Type::I32);
  expect_bad_mask(q < wrong, wrong, "declared f32 but used as i32");
  expect_bad_mask(score > 0.0, score, "variable 'score' is not available");
  expect_bad_score(score + f32(row), row, "variable 'row' is not available");
  LossProgram l = loss();
  l.logit = logit + f32(q);
  expect_user_error([&] { validate(l); }, {"program 'lossprog'", "logit", "`q`", "'q'"});
}

TEST(Validate, WrongResultTypes) {
  AttentionProgram p = attention();
  p.mask = q - kv;
  expect_user_error([&] { validate(p); }, {"program 'prog'", "mask must be bool", "`q - kv`"});
  p = attention();
  p.score = q > kv;
  expect_user_error([&] { validate(p); }, {"program 'prog'", "score must be f32", "`q > kv`"});
  p = attention();
  p.score = Expr();
  expect_user_error([&] { validate(p); }, {"program 'prog'", "score is not set"});
}

TEST(Validate, BadDeclarations) {
  AttentionProgram p = attention();
  p.params.push_back({"doc", Type::F32});
  expect_user_error([&] { validate(p); }, {"program 'prog'", "'doc' is declared twice"});
  p = attention();
  p.params.push_back({"q", Type::I32});
  expect_user_error([&] { validate(p); }, {"program 'prog'", "'q' is reserved"});
  p = attention();
  p.buffers.push_back({"exp", ElemType::F32, {"S"}});
  expect_user_error([&] { validate(p); }, {"program 'prog'", "'exp' is reserved"});
  p = attention();
  p.buffers.push_back({"my buf", ElemType::F32, {"S"}});
  expect_user_error([&] { validate(p); }, {"program 'prog'", "'my buf' is not an identifier"});
  p = attention();
  p.buffers.push_back({"empty", ElemType::F32, {}});
  expect_user_error([&] { validate(p); }, {"program 'prog'", "'empty' has no dimensions"});
  p = attention();
  p.params.push_back({"flag", Type::Bool});
  expect_user_error([&] { validate(p); }, {"program 'prog'", "'flag' must be f32 or i32"});
  p = attention();
  p.name = "";
  expect_user_error([&] { validate(p); }, {"program name '' is not an identifier"});
}

TEST(Validate, BadLossLayouts) {
  auto expect_bad = [](const std::function<void(LossProgram&)>& edit, std::string what) {
    LossProgram l = loss();
    edit(l);
    expect_user_error([&] { validate(l); }, {"program 'lossprog'", what});
  };
  expect_bad([](LossProgram& l) { l.segments.clear(); }, "no segments");
  expect_bad([](LossProgram& l) { l.segments[1].begin = 900; }, "overlap");
  expect_bad([](LossProgram& l) { std::swap(l.segments[0], l.segments[1]); }, "not sorted");
  expect_bad([](LossProgram& l) { l.segments[0].begin = -5; }, "begins at -5 < 0");
  expect_bad([](LossProgram& l) { l.segments[1].end = 1024; }, "is empty");
  expect_bad([](LossProgram& l) { l.segments[0].weight = ""; }, "no valid weight name");
  expect_bad([](LossProgram& l) { l.segments[1].name = "base"; }, "used twice");
  expect_bad([](LossProgram& l) { l.segments[1].end = int64_t{1} << 32; }, "past the i32 id range");
  expect_bad([](LossProgram& l) { l.label_smoothing = 1.0; }, "label_smoothing must be in [0, 1)");
  expect_bad([](LossProgram& l) { l.label_smoothing = std::nan(""); }, "label_smoothing");
  expect_bad([](LossProgram& l) { l.z_loss = -1e-4; }, "z_loss must be finite and >= 0");
  expect_bad([](LossProgram& l) { l.kl = KlTerm{1.5, 1.0, {}}; }, "kl alpha must be in [0, 1]");
  expect_bad(
      [](LossProgram& l) {
        l.kl = KlTerm{0.5, 0.0, {}};
      },
      "temperature must be finite and > 0");
  expect_bad(
      [](LossProgram& l) {
        l.kl = KlTerm{0.5, 2.0, {{"t0", 10, 20, "teacher_head", ""}, {"t1", 15, 30, "t2", ""}}};
      },
      "teacher segments 't0' [10, 20) and 't1' [15, 30) overlap");
  expect_bad(
      [](LossProgram& l) {
        l.kl = KlTerm{0.5, 2.0, {{"t0", 0, 10, "teacher_head", ""}}};
      },
      "the teacher segments must cover exactly the student's live ids");
  // The same live ids split differently is fine.
  LossProgram ok = loss();
  std::vector<Segment> teacher;
  for (const Segment& s : ok.segments) {
    Segment a = s, b = s;
    a.name = "ta_" + s.name, a.weight = "tw_a_" + s.name, a.end = s.begin + s.size() / 2;
    b.name = "tb_" + s.name, b.weight = "tw_b_" + s.name, b.begin = a.end, b.bias = "";
    a.bias = "";
    teacher.push_back(a);
    teacher.push_back(b);
  }
  ok.kl = KlTerm{0.5, 2.0, teacher};
  EXPECT_NO_THROW(validate(ok));
}

}  // namespace
}  // namespace tilejit
