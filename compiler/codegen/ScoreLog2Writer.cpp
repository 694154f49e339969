#include "compiler/codegen/ScoreLog2Writer.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "compiler/codegen/BodyWriter.h"
#include "compiler/codegen/ScoreFold.h"

namespace tilejit {

namespace {

constexpr std::string_view kLog2e = "1.4426950408889634f";

// The spelling of e * f (f a product of factors free of score) over the linear top of a
// score_mod body (ScoreFold.h): log2e distributed down to score, which becomes acc * (scale * f),
// and to the other terms. With `unit`: score reached from the top through sums, differences and
// negations only (its multiplier still `*unit`) is acc itself -- the multiplier being 1 / scale.
std::string scaled_term(BodyWriter& writer, const ScoreFold& fold, const Expr& e,
                        const std::string& f, const std::string* unit = nullptr) {
  if (is_score_var(e)) return unit && f == *unit ? "acc" : fmt::format("(acc * (scale * {}))", f);
  if (!fold.linear.contains(e.get())) return fmt::format("({} * {})", writer.scope(e, 4), f);
  switch (e.op()) {
    case Op::Add:
      return fmt::format("({} + {})", scaled_term(writer, fold, e.arg(0), f, unit),
                         scaled_term(writer, fold, e.arg(1), f, unit));
    case Op::Sub:
      return fmt::format("({} - {})", scaled_term(writer, fold, e.arg(0), f, unit),
                         scaled_term(writer, fold, e.arg(1), f, unit));
    case Op::Neg: return fmt::format("(-{})", scaled_term(writer, fold, e.arg(0), f, unit));
    default: {  // Mul by a factor free of score
      const int k = factor_operand(e);
      return scaled_term(writer, fold, e.arg(1 - k),
                         fmt::format("({} * {})", writer.scope(e.arg(k), 4), f), unit);
    }
  }
}

// Whether score itself is a term of the body's linear top reached through sums, differences and
// negations only (score + bias, bias - score): its factor there is 1.
bool score_is_unit_term(const ScoreFold& fold, const Expr& e) {
  if (is_score_var(e)) return true;
  if (!fold.linear.contains(e.get())) return false;
  switch (e.op()) {
    case Op::Add:
    case Op::Sub: return score_is_unit_term(fold, e.arg(0)) || score_is_unit_term(fold, e.arg(1));
    case Op::Neg: return score_is_unit_term(fold, e.arg(0));
    default: return false;
  }
}

// The node through which score_mod reads score (ScoreFold::entry) as the raw product times its
// factors: acc * ((scale * s) * r) for score / D (1 / D = s * r, a part's reciprocal), acc *
// (scale * K) for a product.
void bind_score_entry(BodyWriter& writer, const Expr& e) {
  if (e.op() == Op::Div) {
    const std::string& r = writer.recip_of(e.arg(1));
    writer.bind(e, fmt::format("(acc * ((scale * {0}.s) * {0}.r))", r));
  } else {
    const Expr& k = ir::uses_var(e.arg(0), var::score) ? e.arg(1) : e.arg(0);
    writer.bind(e, fmt::format("(acc * (scale * {}))", writer.scope(k, 4)));
  }
}

// Opens a generated function: its declaration line and `#line`, and a writer of its body that
// reads the given parts (the hook argument naming each) and score's entry node.
BodyWriter open_function(std::string& out, std::string_view declaration,
                         const std::vector<std::pair<std::string_view, HookPart>>& parts,
                         const ScoreFold& fold, const HookSourceInfo& info) {
  out += fmt::format("  __device__ __forceinline__ static {} {{\n#line 1 \"{}\"\n", declaration,
                     info.file);
  BodyWriter writer(out, info.members);
  writer.convert_small_ints(info.positions_bounded);
  for (const auto& [arg, part] : parts) writer.bind_part(arg, part);
  if (fold.entry.defined()) bind_score_entry(writer, fold.entry);
  return writer;
}

// Opens `float NAME(a, qp, kp, acc, scale, b, h, q, kv)` over score_mod's parts, with `score`
// declared where the body reads it other than through its entry node.
BodyWriter open_score_function(std::string& out, std::string_view name, const ScoreFold& fold,
                               const HookSplit& split, const HookSourceInfo& info) {
  BodyWriter writer = open_function(
      out,
      fmt::format("float {}(const TjArgs& a, const ScoreQ& qp, const ScoreKv& kp, float acc, "
                  "float scale, int b, int h, int q, int kv)",
                  name),
      {{"qp", {split.q_values, split.q_recips}}, {"kp", {split.kv_values, split.kv_recips}}}, fold,
      info);
  if (fold.reads_score_otherwise) out += "    const float score = acc * scale;\n";
  return writer;
}

// The fold of score_mod's body, its entry dropped where it is a quotient no part holds the
// divisor's reciprocal of (a divisor free of score but depending on both q and kv is divided
// per element), and the products a part holds whole kept whole (w * bias[kv] is read from the
// kv part times the factor, not loaded again per element to be multiplied by w * factor).
ScoreFold fold_with_split(const Expr& body, const HookSplit& split) {
  ScoreFold fold = fold_score(body);
  for (const std::vector<Expr>* values : {&split.q_values, &split.kv_values})
    for (const Expr& v : *values) fold.linear.erase(v.get());
  if (fold.entry.defined() && fold.entry.op() == Op::Div &&
      !divides_by_part_recip(split, fold.entry)) {
    fold.entry = Expr();
    fold.reads_score_otherwise = true;
  }
  return fold;
}

// score_log2 = score_log2_unscaled * score_log2_factor with a factor free of score and of the
// positions, where there is one: a kernel takes the row maximum on the unscaled logits and
// applies the factor, when it is positive, in the exponent's FFMA (one multiply per element
// less). Two forms:
//   - the body is such a product, F * G (cap * tanh(score / cap)): the factor is F * log2e;
//   - score is a unit term of the linear top (score + slope * f32(kv - q)): the factor is
//     scale * log2e, the unscaled logit acc + the other terms times 1 / scale.
// The factor depends on the head at most: the function takes the q part of any row.
void write_score_log2_factored(std::string& out, const Expr& body, const ScoreFold& fold,
                               const HookSplit& split, const HookSourceInfo& info) {
  Expr factor, rest;  // rest: the body without the factor (the product form)
  if (body.op() == Op::Mul && fold.linear.contains(body.get())) {
    const int k = factor_operand(body);
    factor = body.arg(k), rest = body.arg(1 - k);
    if (ir::uses_var(factor, var::q) || ir::uses_var(factor, var::kv) ||
        ir::uses_var(factor, var::score))
      return;
    // score_log2_factor binds the q part only: a factor reading a kv part's value is left alone
    bool reads_kv_part = false;
    ir::visit_post_order(factor, [&](const Expr& e) {
      for (const Expr& v : split.kv_values) reads_kv_part |= e.same_as(v);
      for (const Expr& r : split.kv_recips) reads_kv_part |= e.same_as(r);
    });
    if (reads_kv_part) return;
  } else if (!score_is_unit_term(fold, body)) {
    return;
  }
  out +=
      "\n  // score_log2 = score_log2_unscaled * score_log2_factor, the factor free of score and "
      "of\n"
      "  // the positions (OnlineSoftmax's s_scale)\n";
  out += "  static constexpr bool kScoreLog2Factored = true;\n";
  {
    BodyWriter writer = open_function(
        out,
        "float score_log2_factor(const TjArgs& a, const ScoreQ& qp, float scale, int b, int h)",
        {{"qp", {split.q_values, split.q_recips}}}, ScoreFold{}, info);
    const std::string value = factor.defined() ? writer.scope(factor, 4) : "scale";
    out += fmt::format("    return {} * {};\n  }}\n", value, kLog2e);
  }
  BodyWriter writer = open_score_function(out, "score_log2_unscaled", fold, split, info);
  const std::string unit = "(1.0f / scale)";
  const std::string value = factor.defined() ? scaled_term(writer, fold, rest, "1.0f")
                                             : scaled_term(writer, fold, body, unit, &unit);
  out += fmt::format("    return {};\n  }}\n", value);
}

}  // namespace

void write_score_log2(std::string& out, const Expr& body, const HookSplit& split,
                      const HookSourceInfo& info) {
  const ScoreFold fold = fold_with_split(body, split);
  if (!fold.folds()) return;
  out +=
      "\n  // log2e * score_mod(scale * acc), its factors folded per row "
      "(compiler/codegen/ScoreFold.h)\n";
  out += "  static constexpr bool kScoreLog2 = true;\n";
  BodyWriter writer = open_score_function(out, "score_log2", fold, split, info);
  const std::string value = scaled_term(writer, fold, body, std::string(kLog2e));
  out += fmt::format("    return {};  // log2e = 1.4426950408889634\n  }}\n", value);
  write_score_log2_factored(out, body, fold, split, info);
}

void write_score_log2_grad(std::string& out, const Expr& score, const Expr& grad,
                           const HookSourceInfo& info) {
  const HookSplit score_split = split_hook(score), grad_split = split_hook(grad);
  const ScoreFold fold = fold_with_split(score, score_split);
  if (!fold.entry.defined() || fold.reads_score_otherwise) return;
  // score_grad reads score through the same node only
  bool only_entry = true;
  ir::visit_post_order(grad, [&](const Expr& e) {
    if (e.same_as(fold.entry)) return;
    for (size_t i = 0; i < e.num_args(); ++i) only_entry = only_entry && !is_score_var(e.arg(i));
  });
  if (!only_entry) return;
  out += "\n  // score_log2 and score_grad at one point, their common nodes computed once\n";
  out += "  static constexpr bool kScoreGradLog2 = true;\n";
  BodyWriter writer = open_function(
      out,
      "float score_log2_grad(const TjArgs& a, const ScoreQ& qp, const ScoreKv& kp, const GradQ& "
      "gq, const GradKv& gk, float acc, float scale, int b, int h, int q, int kv, float& grad)",
      {{"qp", {score_split.q_values, score_split.q_recips}},
       {"kp", {score_split.kv_values, score_split.kv_recips}},
       {"gq", {grad_split.q_values, grad_split.q_recips}},
       {"gk", {grad_split.kv_values, grad_split.kv_recips}}},
      fold, info);
  const std::string value = scaled_term(writer, fold, score, std::string(kLog2e));
  out += fmt::format("    grad = {};\n", writer.scope(grad, 4));
  out += fmt::format("    return {};  // log2e = 1.4426950408889634\n  }}\n", value);
}

}  // namespace tilejit
