// The multiplications around score_mod, folded per row.
//
// Attention kernels need a score_mod's logit in the log2 domain, from the raw product
// acc = <q, k>: log2e * score_mod(scale * acc). Evaluated as written, each element pays for the
// multiply by scale, for every factor score_mod applies to score before anything else, for every
// factor it applies to its result, and for log2e: five multiplies per element around a soft-cap's
// tanh (scale, the divisor's reciprocal in two steps, cap, log2e), three around ALiBi's bias.
// Instead log2e is distributed over the body's linear top -- sums, differences, negations and
// products by a factor free of score -- down to score itself, which becomes acc * (scale * F),
// and to the other terms, each multiplied by its product of factors F. Below the linear top, the
// one node through which score is read, score / D or score * K (D and K free of score), becomes
// acc * ((scale * s) * r) (1 / D = s * r, the reciprocal a part of the hook prepares,
// HookSplit.h) or acc * (scale * K). The factor products depend on the row at most, so they are
// computed once per row (or once per tile: the kernel's common subexpressions):
//     log2e * (cap * tanh(scale * acc / cap))   ->  tanh(acc * ((scale * s) * r)) * (cap * log2e)
//     log2e * (scale * acc + slope * f32(kv - q)) ->  acc * (scale * log2e)
//                                                   + f32(kv - q) * (slope * log2e)
// This reassociates products (a few ulp of each term) and distributes a product over a sum
// (a few ulp of the larger term); the transcendentals the kernels use (tanh.approx.f32,
// ex2.approx) are far coarser.
#pragma once

#include <unordered_set>

#include "compiler/IR.h"

namespace tilejit {

struct ScoreFold {
  // The nodes log2e distributes over, from the root: Add, Sub, Neg, and Mul with an operand
  // free of score (the factor), f32 only.
  std::unordered_set<const Node*> linear;
  // Below the linear top, the only node reading score: score / D, score * K or K * score with D,
  // K free of score; undefined when there is none or score is read otherwise too.
  Expr entry;
  // Whether score is read below the linear top other than through `entry`.
  bool reads_score_otherwise = false;

  // Whether evaluating the fold saves multiplies over log2e * score_mod(scale * acc).
  bool folds() const { return !linear.empty() || entry.defined(); }
};

// Whether `e` is the variable score itself (a score_mod that is the identity).
bool is_score_var(const Expr& e);

// The fold of a score_mod body.
ScoreFold fold_score(const Expr& body);

// The operand of a linear Mul that is its factor (free of score; where both are, the one that
// does not depend on kv, else the first).
int factor_operand(const Expr& mul);

}  // namespace tilejit
