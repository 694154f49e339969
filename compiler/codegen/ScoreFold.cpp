#include "compiler/codegen/ScoreFold.h"

#include <vector>

namespace tilejit {

namespace {

bool free_of_score(const Expr& e) { return !ir::uses_var(e, var::score); }

// Whether `e` is score / D, score * K or K * score with D, K free of score (f32).
bool is_entry(const Expr& e) {
  if (e.type() != Type::F32) return false;
  if (e.op() == Op::Div) return is_score_var(e.arg(0)) && free_of_score(e.arg(1));
  if (e.op() == Op::Mul)
    return (is_score_var(e.arg(0)) && free_of_score(e.arg(1))) ||
           (is_score_var(e.arg(1)) && free_of_score(e.arg(0)));
  return false;
}

bool is_linear(const Expr& e) {
  if (e.type() != Type::F32) return false;
  switch (e.op()) {
    case Op::Add:
    case Op::Sub:
    case Op::Neg: return true;
    case Op::Mul: return free_of_score(e.arg(0)) || free_of_score(e.arg(1));
    default: return false;
  }
}

}  // namespace

bool is_score_var(const Expr& e) { return e.op() == Op::Var && e->name == var::score; }

int factor_operand(const Expr& mul) {
  const bool free0 = free_of_score(mul.arg(0)), free1 = free_of_score(mul.arg(1));
  if (free0 && free1)
    return ir::uses_var(mul.arg(0), var::kv) && !ir::uses_var(mul.arg(1), var::kv);
  return free0 ? 0 : 1;
}

ScoreFold fold_score(const Expr& body) {
  ScoreFold fold;
  // The linear top, and the roots of the subexpressions below it that read score.
  std::vector<Expr> stack{body}, below;
  while (!stack.empty()) {
    Expr e = stack.back();
    stack.pop_back();
    if (is_score_var(e)) continue;  // acc * (scale * F)
    // A term free of score is multiplied by F; a product's factor takes F in.
    if (free_of_score(e) && !(e.op() == Op::Mul && e.type() == Type::F32)) continue;
    if (!is_linear(e)) {
      below.push_back(e);
      continue;
    }
    if (!fold.linear.insert(e.get()).second) continue;
    if (e.op() == Op::Mul)
      stack.push_back(e.arg(1 - factor_operand(e)));
    else
      for (size_t i = 0; i < e.num_args(); ++i) stack.push_back(e.arg(i));
  }
  // Below the linear top: every node with score as an operand (the DAG is hash-consed, so every
  // `score / cap` of the body is one node).
  std::vector<Expr> readers;
  for (const Expr& root : below) {
    if (is_entry(root)) {
      readers.push_back(root);
      continue;
    }
    ir::visit_post_order(root, [&](const Expr& e) {
      for (size_t i = 0; i < e.num_args(); ++i)
        if (is_score_var(e.arg(i))) {
          readers.push_back(e);
          break;
        }
    });
  }
  bool one_reader = !readers.empty();
  for (const Expr& r : readers) one_reader = one_reader && r.same_as(readers[0]);
  if (one_reader && is_entry(readers[0]))
    fold.entry = readers[0];
  else
    fold.reads_score_otherwise = !readers.empty();
  return fold;
}

}  // namespace tilejit
