// HookSplit: the q part holds no kv or score, the kv part no q or score, every subexpression the
// per-element rest reads is either computed by the rest, a leaf or a part's value (maximal
// parts), and putting the parts' values back into the rest gives the hook's value -- checked
// with the interpreter (f32 rounding, so part values are f32 numbers) on random programs at
// random points, the part values computed at a point whose other position and score are random
// too. Loss hooks likewise: the constant part reads neither logit, row nor id, the row part only
// the row, their values computed at a point whose id and logit (and, for the constant part, row)
// are random.
#include <gtest/gtest.h>

#include <functional>
#include <unordered_set>

#include "compiler/Differentiate.h"
#include "compiler/Interpreter.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "compiler/codegen/HookSplit.h"
#include "dsl/TextForm.h"
#include "tests/compiler/RandomBindings.h"
#include "tests/support/RandomProgram.h"

namespace tilejit::testing {
namespace {

bool holds(const std::vector<Expr>& list, const Expr& e) {
  for (const Expr& x : list)
    if (x.same_as(e)) return true;
  return false;
}

Expr constant(const Value& v) {
  switch (v.type) {
    case Type::Bool: return ir::make_bool(v.b);
    case Type::I32: return ir::make_int(v.i);
    case Type::F32: return ir::make_float(v.f);
  }
  return {};
}

// The per-element rest of a split hook: every non-leaf operand it reads that a part could hold
// (`invariant`) must be a part's value (`in_part`) or, for an f32 divisor, a part's reciprocal
// (maximal parts). A message naming the first violation, "" when none.
template <class Split, class InPart, class Invariant>
std::string rest_problem(const Expr& body, const Split& split, InPart in_part, Invariant invariant) {
  std::unordered_set<const Node*> seen;
  std::string problem;
  std::function<void(const Expr&)> walk = [&](const Expr& e) {
    if (!seen.insert(e.get()).second || !problem.empty()) return;
    for (size_t i = 0; i < e.num_args(); ++i) {
      const Expr& a = e.arg(i);
      if (i == 1 && e.op() == Op::Div && e.type() == Type::F32 && invariant(a)) {
        if (!divides_by_part_recip(split, e)) problem = "divisor without recip " + print_expr(a);
      } else if (in_part(a) || ir::is_leaf(a)) {
      } else if (invariant(a)) {
        problem = "invariant operand left in the rest: " + print_expr(a);
      } else {
        walk(a);
      }
    }
  };
  walk(body);
  return problem;
}

// The structural properties, with a message naming the first violation ("" when none).
std::string check_structure(const Expr& body, const HookSplit& split) {
  for (const Expr& e : split.q_values)
    if (ir::is_leaf(e) || ir::uses_var(e, var::kv) || ir::uses_var(e, var::score))
      return "q part value " + print_expr(e);
  for (const Expr& e : split.kv_values)
    if (ir::is_leaf(e) || ir::uses_var(e, var::q) || ir::uses_var(e, var::score) ||
        !ir::uses_var(e, var::kv))
      return "kv part value " + print_expr(e);
  for (const Expr& e : split.q_recips)
    if (ir::uses_var(e, var::kv) || ir::uses_var(e, var::score)) return "q recip " + print_expr(e);
  for (const Expr& e : split.kv_recips)
    if (ir::uses_var(e, var::q) || ir::uses_var(e, var::score)) return "kv recip " + print_expr(e);
  auto in_part = [&](const Expr& e) { return holds(split.q_values, e) || holds(split.kv_values, e); };
  auto invariant = [](const Expr& e) {
    const bool q = ir::uses_var(e, var::q), kv = ir::uses_var(e, var::kv);
    return !ir::uses_var(e, var::score) && !(q && kv);
  };
  if (in_part(body)) return "";
  if (!ir::is_leaf(body) && invariant(body)) return "the whole hook is invariant but not a part";
  // The rest: every non-leaf operand it reads that is free of score and of one position must be
  // a part value (or, for an f32 divisor, a part's reciprocal).
  return rest_problem(body, split, in_part, invariant);
}

// `body` with each part expression replaced by its value (a constant).
Expr with_parts_put_back(const Expr& body, const std::vector<std::pair<Expr, Expr>>& put_back) {
  return ir::rebuild(body, [&](const Expr& old, std::vector<Expr> args) {
    for (const auto& [part, value] : put_back)
      if (old.same_as(part)) return value;
    if (args.empty()) return old;
    if (old.op() == Op::Load) return ir::make_load(old->name, old.type(), std::move(args));
    if (old.op() == Op::Cast) return ir::make_cast(old.type(), std::move(args[0]));
    return ir::make(old.op(), std::move(args));
  });
}

// The hook's value at `at` against the rest's with the parts' values put back, the q part
// computed where kv and score are random, the kv part where q and score are.
void check_values(const Expr& body, const HookSplit& split, const RandomBindings& bindings,
                  std::mt19937_64& rng, const std::string& what) {
  for (int i = 0; i < 20; ++i) {
    EvalContext at = bindings.point(rng, FloatPrecision::F32);
    EvalContext q_side = bindings.point(rng, FloatPrecision::F32);
    EvalContext kv_side = bindings.point(rng, FloatPrecision::F32);
    q_side.b = kv_side.b = at.b;
    q_side.h = kv_side.h = at.h;
    q_side.q = at.q;
    kv_side.kv = at.kv;
    std::vector<std::pair<Expr, Expr>> put_back;
    for (const Expr& e : split.q_values) put_back.emplace_back(e, constant(evaluate(e, q_side)));
    for (const Expr& e : split.kv_values) put_back.emplace_back(e, constant(evaluate(e, kv_side)));
    Expr rest = with_parts_put_back(body, put_back);
    const Value want = evaluate(body, at), got = evaluate(rest, at);
    ASSERT_TRUE(same_value(want, got))
        << what << " at q " << at.q << " kv " << at.kv << ": hook " << show(want)
        << ", rest with the parts put back " << show(got);
  }
}

TEST(HookSplit, StandardShapes) {
  AttentionProgram doc = parse_attention(
      "attention d {\nbuffer doc : i32[B, S]\nmask = doc[b, q] == doc[b, kv] && q >= kv\n}");
  HookSplit s = split_hook(doc.mask);
  ASSERT_EQ(s.q_values.size(), 1u);
  ASSERT_EQ(s.kv_values.size(), 1u);
  EXPECT_EQ(print_expr(s.q_values[0]), "doc[b, q]");
  EXPECT_EQ(print_expr(s.kv_values[0]), "doc[b, kv]");

  AttentionProgram alibi = parse_attention(
      "attention a {\nbuffer slopes : f32[H]\nscore = score + slopes[h] * f32(kv - q)\n}");
  s = split_hook(alibi.score);
  ASSERT_EQ(s.q_values.size(), 1u);  // a value of (b, h) alone goes to the q part
  EXPECT_EQ(print_expr(s.q_values[0]), "slopes[h]");
  EXPECT_TRUE(s.kv_values.empty());

  AttentionProgram cap =
      parse_attention("attention c {\nparam cap : f32\nscore = cap * tanh(score / cap)\n}");
  s = split_hook(cap.score);
  EXPECT_TRUE(s.q_values.empty());  // a param is a leaf: read as is
  ASSERT_EQ(s.q_recips.size(), 1u);
  EXPECT_EQ(print_expr(s.q_recips[0]), "cap");

  AttentionProgram prefix =
      parse_attention("attention p {\nbuffer prefix : i32[B]\nmask = kv < prefix[b] || q >= kv\n}");
  s = split_hook(prefix.mask);  // the largest kv-only subexpression, comparison included
  EXPECT_TRUE(s.q_values.empty());
  ASSERT_EQ(s.kv_values.size(), 1u);
  EXPECT_EQ(print_expr(s.kv_values[0]), "kv < prefix[b]");

  AttentionProgram whole =
      parse_attention("attention w {\nbuffer keep : i32[S]\nmask = keep[kv] != 0\n}");
  s = split_hook(whole.mask);  // the hook itself is the kv part
  ASSERT_EQ(s.kv_values.size(), 1u);
  EXPECT_TRUE(s.kv_values[0].same_as(whole.mask));

  AttentionProgram per_column = parse_attention(
      "attention k {\nbuffer t : f32[S]\nscore = score / (t[kv] + 1.0)\n}");
  s = split_hook(per_column.score);
  EXPECT_TRUE(s.kv_values.empty());  // read only as a divisor: the part holds its reciprocal
  ASSERT_EQ(s.kv_recips.size(), 1u);
  EXPECT_EQ(print_expr(s.kv_recips[0]), "t[kv] + 1.0");

  for (const AttentionProgram* p : {&doc, &alibi, &cap, &prefix, &whole, &per_column})
    for (const Expr& e : {p->mask, p->score}) EXPECT_EQ(check_structure(e, split_hook(e)), "");
}

TEST(HookSplit, RandomProgramsSplitSoundly) {
  std::mt19937_64 rng(20261130);
  int parts = 0;
  for (int i = 0; i < 300; ++i) {
    AttentionProgram p = random_attention_program(rng);
    RandomBindings bindings(rng, p.buffers, p.params);
    for (const Expr& body : {p.mask, p.score}) {
      const std::string what = print_expr(body);
      HookSplit split = split_hook(body);
      ASSERT_EQ(check_structure(body, split), "") << what;
      check_values(body, split, bindings, rng, what);
      if (HasFatalFailure()) return;
      parts += static_cast<int>(split.q_values.size() + split.kv_values.size());
    }
  }
  EXPECT_GT(parts, 100);  // the random programs do exercise the split
}

// ---- loss hooks: constant part, row part ---------------------------------------------------

bool reads_element_var(const Expr& e) {
  return ir::uses_var(e, var::logit) || ir::uses_var(e, var::id);
}

// The structural properties of a loss hook's split, with a message naming the first violation.
std::string check_loss_structure(const Expr& body, const LossHookSplit& split) {
  for (const Expr& e : split.constant.values)
    if (ir::is_leaf(e) || reads_element_var(e) || ir::uses_var(e, var::row))
      return "constant part value " + print_expr(e);
  for (const Expr& e : split.row.values)  // a value free of the row too is the constant part's
    if (ir::is_leaf(e) || reads_element_var(e) || !ir::uses_var(e, var::row))
      return "row part value " + print_expr(e);
  for (const Expr& e : split.constant.recips)
    if (reads_element_var(e) || ir::uses_var(e, var::row)) return "constant recip " + print_expr(e);
  for (const Expr& e : split.row.recips)
    if (reads_element_var(e) || !ir::uses_var(e, var::row)) return "row recip " + print_expr(e);
  auto in_part = [&](const Expr& e) {
    return holds(split.constant.values, e) || holds(split.row.values, e);
  };
  if (in_part(body)) return "";
  if (!ir::is_leaf(body) && !reads_element_var(body))
    return "the whole hook is invariant but not a part";
  return rest_problem(body, split, in_part, [](const Expr& e) { return !reads_element_var(e); });
}

// The hook's value at `at` against the rest's with the parts' values put back: the constant part
// computed at an unrelated point, the row part at one that shares only the row.
void check_loss_values(const Expr& body, const LossHookSplit& split, const RandomBindings& bindings,
                       std::mt19937_64& rng, const std::string& what) {
  for (int i = 0; i < 20; ++i) {
    EvalContext at = bindings.point(rng, FloatPrecision::F32);
    EvalContext anywhere = bindings.point(rng, FloatPrecision::F32);
    EvalContext same_row = bindings.point(rng, FloatPrecision::F32);
    same_row.row = at.row;
    std::vector<std::pair<Expr, Expr>> put_back;
    for (const Expr& e : split.constant.values)
      put_back.emplace_back(e, constant(evaluate(e, anywhere)));
    for (const Expr& e : split.row.values)
      put_back.emplace_back(e, constant(evaluate(e, same_row)));
    Expr rest = with_parts_put_back(body, put_back);
    const Value want = evaluate(body, at), got = evaluate(rest, at);
    ASSERT_TRUE(same_value(want, got))
        << what << " at row " << at.row << " id " << at.id << " logit " << at.logit << ": hook "
        << show(want) << ", rest with the parts put back " << show(got);
  }
}

std::vector<std::string> printed(const std::vector<Expr>& list) {
  std::vector<std::string> out;
  for (const Expr& e : list) out.push_back(print_expr(e));
  return out;
}

LossProgram loss_with(const std::string& decls, const std::string& logit) {
  return parse_loss("loss l {\n" + decls + "\nsegment v : [0, 1000) weight W\nlogit = " + logit +
                    "\n}");
}

TEST(LossHookSplit, StandardShapes) {
  using V = std::vector<std::string>;
  // Gemma 2's soft-cap: the division by cap becomes a multiply by the constant part's reciprocal.
  LossProgram cap = loss_with("param cap : f32", "cap * tanh(logit / cap)");
  LossHookSplit s = split_loss_hook(cap.logit);
  EXPECT_TRUE(s.constant.values.empty());  // a param is a leaf: read as is
  EXPECT_EQ(printed(s.constant.recips), V{"cap"});
  EXPECT_TRUE(s.row.values.empty());
  EXPECT_TRUE(s.row.recips.empty());

  // Its derivative as the compiler writes it: 1.0 / cap is a constant value, computed once.
  LoweredLoss lowered = lower(cap);
  s = split_loss_hook(lowered.logit_grad);
  EXPECT_EQ(printed(s.constant.values), V{"1.0 / cap"});
  EXPECT_EQ(printed(s.constant.recips), V{"cap"});
  EXPECT_TRUE(s.row.values.empty());

  // A per-row temperature: the row part holds the reciprocal of the divisor.
  LossProgram temp = loss_with("buffer temp : f32[N]", "logit / (temp[row] + 1.0)");
  s = split_loss_hook(temp.logit);
  EXPECT_TRUE(s.constant.values.empty());
  EXPECT_TRUE(s.row.values.empty());
  EXPECT_EQ(printed(s.row.recips), V{"temp[row] + 1.0"});

  // The largest row-only subexpression, a constant one inside it included.
  LossProgram scaled =
      loss_with("buffer w : f32[N]\nparam a : f32", "logit * (w[row] * (a * 2.0)) + a * 3.0");
  s = split_loss_hook(scaled.logit);
  EXPECT_EQ(printed(s.row.values), V{"w[row] * (a * 2.0)"});
  EXPECT_EQ(printed(s.constant.values), V{"a * 3.0"});

  // Per id: nothing to hoist but the divisor and the comparison's constant side.
  LossProgram per_id =
      loss_with("param cap : f32\nparam cut : i32", "select(id < cut * 2, logit / cap, logit)");
  s = split_loss_hook(per_id.logit);
  EXPECT_EQ(printed(s.constant.values), V{"cut * 2"});
  EXPECT_EQ(printed(s.constant.recips), V{"cap"});
  EXPECT_TRUE(s.row.values.empty());

  // A hook of the row alone is the row part; a buffer of (row, id) stays per element.
  LossProgram whole = loss_with("buffer w : f32[N]", "w[row] * 2.0");
  s = split_loss_hook(whole.logit);
  ASSERT_EQ(s.row.values.size(), 1u);
  EXPECT_TRUE(s.row.values[0].same_as(whole.logit));
  LossProgram both = loss_with("buffer b2 : f32[N, V]", "logit + b2[row, id]");
  s = split_loss_hook(both.logit);
  EXPECT_TRUE(s.constant.values.empty() && s.constant.recips.empty());
  EXPECT_TRUE(s.row.values.empty() && s.row.recips.empty());

  // The identity: nothing at all.
  s = split_loss_hook(loss_with("", "logit").logit);
  EXPECT_TRUE(s.constant.values.empty() && s.row.values.empty());

  for (const LossProgram* p : {&cap, &temp, &scaled, &per_id, &whole, &both})
    EXPECT_EQ(check_loss_structure(p->logit, split_loss_hook(p->logit)), "") << p->name;
}

TEST(LossHookSplit, RandomProgramsSplitSoundly) {
  std::mt19937_64 rng(20261201);
  int constant_parts = 0, row_parts = 0;
  for (int i = 0; i < 300; ++i) {
    LossProgram p = random_loss_program(rng);
    RandomBindings bindings(rng, p.buffers, p.params);
    for (const Expr& body : {p.logit, differentiate(p.logit, var::logit)}) {
      const std::string what = print_expr(body);
      LossHookSplit split = split_loss_hook(body);
      ASSERT_EQ(check_loss_structure(body, split), "") << what;
      check_loss_values(body, split, bindings, rng, what);
      if (HasFatalFailure()) return;
      constant_parts += static_cast<int>(split.constant.values.size());
      constant_parts += static_cast<int>(split.constant.recips.size());
      row_parts += static_cast<int>(split.row.values.size() + split.row.recips.size());
    }
  }
  EXPECT_GT(constant_parts, 50);  // the random programs do exercise both parts
  EXPECT_GT(row_parts, 50);
}

}  // namespace
}  // namespace tilejit::testing
