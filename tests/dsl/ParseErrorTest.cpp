// Malformed program text: each case must raise a ParseError at the exact line and column, with
// a message that says what is wrong.
#include <gtest/gtest.h>

#include "dsl/TextForm.h"

namespace tilejit {
namespace {

struct BadInput {
  const char* name;
  const char* text;
  int line;
  int col;
  const char* fragment;
};

const BadInput kBad[] = {
    {"empty file", "", 1, 1, "expected 'attention' or 'loss'"},
    {"unknown kind", "# c\nkernel x {}\n", 2, 1, "expected 'attention' or 'loss', got 'kernel'"},
    {"missing name", "attention {\n}\n", 1, 11, "expected a program name"},
    {"missing close", "attention a {\n  mask = q >= kv\n", 2, 17,
     "expected '}' to close attention 'a'"},
    {"unknown name", "attention a {\n  mask = dco[b, q] == 1\n}\n", 2, 10, "unknown name 'dco'"},
    {"score in mask", "attention a {\n  mask = score > 0.0\n}\n", 2, 10,
     "'score' cannot be read in mask"},
    {"loss var in attention", "attention a {\n  score = score + f32(row)\n}\n", 2, 23,
     "'row' cannot be read in score"},
    {"attention var in loss",
     "loss l {\n  segment v : [0, 10) weight W\n  logit = logit * f32(q)\n}\n", 3, 23,
     "'q' cannot be read in logit"},
    {"buffer rank", "attention a {\n  buffer doc : i32[B, S]\n  mask = doc[q] == 0\n}\n", 3, 10,
     "has 2 dimensions [B, S] but is indexed with 1"},
    {"float index", "attention a {\n  buffer doc : i32[B, S]\n  mask = doc[b, 1.5] == 0\n}\n", 3,
     17, "index 1 of buffer 'doc' must be i32"},
    {"duplicate buffer", "attention a {\n  buffer doc : i32[B]\n  param doc : f32\n}\n", 3, 9,
     "'doc' is already declared on line 2"},
    {"reserved name", "attention a {\n  param kv : i32\n}\n", 2, 9, "'kv' is reserved"},
    {"duplicate mask", "attention a {\n  mask = true\n  mask = false\n}\n", 3, 3,
     "'mask' is already set on line 2"},
    {"bad element type", "attention a {\n  buffer x : i64[B]\n}\n", 2, 14,
     "unknown element type 'i64'"},
    {"bool param", "attention a {\n  param x : bool\n}\n", 2, 13, "a param is f32 or i32"},
    {"mask not bool", "attention a {\n  mask = q - kv\n}\n", 2, 10, "mask must be bool"},
    {"score not f32", "attention a {\n  score = q\n}\n", 2, 11, "score must be f32"},
    {"and of ints", "attention a {\n  mask = q && kv\n}\n", 2, 12, "operator '&&' needs bool"},
    {"bool plus int", "attention a {\n  mask = (q < kv) + 1 > 0\n}\n", 2, 19,
     "operator '+' needs numeric"},
    {"single ampersand", "attention a {\n  mask = q >= kv & true\n}\n", 2, 18,
     "logical operators are '&&'"},
    {"stray character", "attention a {\n  mask = q @ kv\n}\n", 2, 12, "unexpected character '@'"},
    {"malformed number", "attention a {\n  score = score * 1.5x\n}\n", 2, 19,
     "malformed number '1.5x'"},
    {"digit after dot", "attention a {\n  score = score * 1.\n}\n", 2, 21,
     "expected a digit after '.'"},
    {"int too large", "attention a {\n  mask = q < 2147483648\n}\n", 2, 14,
     "integer literal 2147483648 does not fit in i32"},
    {"float too large", "attention a {\n  score = score * 1e39\n}\n", 2, 19,
     "outside the f32 range"},
    {"unclosed paren", "attention a {\n  mask = (q >= kv\n  score = score\n}\n", 3, 3,
     "expected ')' to close '('"},
    {"missing operand", "attention a {\n  mask = q >=\n}\n", 2, 14,
     "expected an expression, got end of line"},
    {"two statements on a line", "attention a {\n  mask = q >= kv score = score\n}\n", 2, 18,
     "expected end of line after the statement"},
    {"wrong arity", "attention a {\n  score = min(score)\n}\n", 2, 11,
     "'min' takes 2 arguments, got 1"},
    {"function without call", "attention a {\n  score = tanh\n}\n", 2, 11, "'tanh' is a function"},
    {"buffer without brackets", "attention a {\n  buffer d : i32[B]\n  mask = d == 0\n}\n", 3, 10,
     "buffer 'd' is read with brackets"},
    {"loss statement in attention", "attention a {\n  segment v : [0, 3) weight W\n}\n", 2, 3,
     "expected a statement of an attention program"},
    {"second program", "attention a {}\nattention b {}\n", 2, 1, "one program per file"},
    {"empty segment", "loss l {\n  segment v : [5, 5) weight W\n}\n", 2, 19,
     "segment 'v' [5, 5) is empty"},
    {"overlapping segments",
     "loss l {\n  segment a : [0, 100) weight A\n  segment b : [50, 200) weight B\n}\n", 3, 15,
     "segments are sorted and disjoint"},
    {"unsorted segments",
     "loss l {\n  segment a : [100, 200) weight A\n  segment b : [0, 50) weight B\n}\n", 3, 15,
     "must start at or after the end of segment 'a'"},
    {"negative segment", "loss l {\n  segment a : [-1, 10) weight A\n}\n", 2, 16,
     "start at 0 or above"},
    {"segment without weight", "loss l {\n  segment a : [0, 10) W\n}\n", 2, 23,
     "expected 'weight'"},
    {"teacher before kl",
     "loss l {\n  segment a : [0, 10) weight A\n  teacher segment a : [0, 10) weight T\n}\n", 3, 3,
     "must follow the 'kl' line"},
    {"bad reduction", "loss l {\n  segment a : [0, 10) weight A\n  reduction = avg\n}\n", 3, 15,
     "unknown reduction 'avg'"},
    {"label smoothing range",
     "loss l {\n  segment a : [0, 10) weight A\n  label_smoothing = 1.5\n}\n", 3, 21,
     "label_smoothing must be in [0, 1)"},
    {"kl temperature",
     "loss l {\n  segment a : [0, 10) weight A\n  kl alpha = 0.5 temperature = 0\n}\n", 3, 32,
     "kl temperature must be"},
    {"float ignore index", "loss l {\n  segment a : [0, 10) weight A\n  ignore_index = 1.5\n}\n", 3,
     18, "expected an integer"},
    {"no segments", "loss l {\n  logit = logit\n}\n", 1, 6, "has no segments"},
    {"reserved word from the IR", "attention a {\n  param load : i32\n}\n", 2, 9,
     "'load' is reserved"},
    {"kl without temperature", "loss l {\n  segment a : [0, 10) weight A\n  kl alpha = 0.5\n}\n", 3,
     17, "expected 'temperature'"},
    {"tab before error", "attention a {\n\tmask = q ? kv\n}\n", 2, 11, "unexpected character '?'"},
};

TEST(ParseErrors, EachMalformedInputIsReportedWhereItIsWrong) {
  for (const BadInput& c : kBad) {
    SCOPED_TRACE(c.name);
    try {
      parse_program(c.text, "bad.tj");
      ADD_FAILURE() << "no error for: " << c.text;
    } catch (const ParseError& e) {
      EXPECT_EQ(e.file(), "bad.tj");
      EXPECT_EQ(e.line(), c.line) << e.what();
      EXPECT_EQ(e.column(), c.col) << e.what();
      EXPECT_NE(e.message().find(c.fragment), std::string::npos) << e.what();
      std::string prefix = "bad.tj:" + std::to_string(c.line) + ":" + std::to_string(c.col) + ": ";
      EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a ParseError: " << e.what();
    }
  }
}

TEST(ParseErrors, MessageShowsTheLineAndACaret) {
  try {
    parse_program("attention a {\n  mask = dco[b, q] == 1\n}\n", "f.tj");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()),
              "f.tj:2:10: unknown name 'dco'\n  mask = dco[b, q] == 1\n         ^");
  }
}

TEST(ParseErrors, CaretKeepsTabs) {
  try {
    parse_program("attention a {\n\tmask = q ? kv\n}\n", "f.tj");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("\n\tmask = q ? kv\n\t         ^"), std::string::npos)
        << e.what();
  }
}

TEST(ParseErrors, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "attention a {\n  mask = " + std::string(5000, '(') + "true" +
                     std::string(5000, ')') + "\n}\n";
  EXPECT_THROW(parse_program(deep), ParseError);
  std::string negs = "attention a {\n  score = " + std::string(5000, '-') + "score\n}\n";
  EXPECT_THROW(parse_program(negs), ParseError);
  std::string chain = "attention a {\n  score = score";
  for (int i = 0; i < 20000; ++i) chain += " + score";
  EXPECT_THROW(parse_program(chain + "\n}\n"), ParseError);
}

TEST(ParseErrors, ParseErrorIsAUserError) { EXPECT_THROW(parse_program("attention"), UserError); }

}  // namespace
}  // namespace tilejit
