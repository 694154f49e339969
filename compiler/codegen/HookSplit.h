// Splits a generated hook into parts that kernels compute once for many elements, and the rest,
// per element, which reads them as fields.
//
// An attention hook: the values that depend on (b, h, q) only -- its q part --, those that depend
// on (b, h, kv) only -- its kv part -- and the rest. Kernels compute a part once per query or key
// position of a tile instead of once per element (kernels_templates/hook_parts.cuh).
// A loss hook (logit_mod, logit_grad): the values that depend on neither logit, row nor id -- its
// constant part: params, constants and what is computed from them --, those that depend on the
// row alone -- its row part -- and the rest. Kernels compute the constant part once per thread and
// the row part once per row they hold in a tile (kernels_templates/linear_ce_hook_parts.cuh).
//
// A part holds the operands the per-element rest reads: the largest subexpressions free of the
// variables the part may not read (a subexpression that fits both parts goes to the first: the q
// part, the constant part), never a leaf (a constant, param or variable is as cheap to read as a
// field). An f32 division whose divisor lies in a part is rewritten as a multiply by the
// divisor's reciprocal, which the part prepares (tj_recip, within the 2 ulp of the division it
// replaces: common.cuh).
#pragma once

#include <vector>

#include "compiler/IR.h"

namespace tilejit {

// One part of a split hook.
struct HookPart {
  std::vector<Expr> values;  // fields the rest reads, in first-use order
  std::vector<Expr> recips;  // divisors whose reciprocal the part holds
};

// An attention hook (mask_mod, score_mod, score_grad) over b, h, q, kv and score.
struct HookSplit {
  std::vector<Expr> q_values, kv_values;  // fields of the q / kv part, in first-use order
  std::vector<Expr> q_recips, kv_recips;  // divisors whose reciprocal the q / kv part holds
};

HookSplit split_hook(const Expr& body);

// A loss hook (logit_mod, logit_grad) over logit, row and id.
struct LossHookSplit {
  HookPart constant;  // neither logit, row nor id
  HookPart row;       // row alone
};

LossHookSplit split_loss_hook(const Expr& body);

// Whether `div` (an f32 division read by the per-element rest) divides by a reciprocal that a
// part of `split` holds.
bool divides_by_part_recip(const HookSplit& split, const Expr& div);
bool divides_by_part_recip(const LossHookSplit& split, const Expr& div);

}  // namespace tilejit
