// Splits an attention hook into the values that depend on (b, h, q) only -- its q part --,
// those that depend on (b, h, kv) only -- its kv part -- and the rest, per element. Kernels
// compute a part once per query or key position of a tile instead of once per element
// (kernels_templates/hook_parts.cuh); the generated hooks read the parts' values as fields.
//
// A part holds the operands the per-element rest reads: the largest subexpressions free of the
// other position and of `score` (a subexpression of b and h alone goes to the q part), never a
// leaf (a constant, param or variable is as cheap to read as a field). An f32 division whose
// divisor lies in a part is rewritten as a multiply by the divisor's reciprocal, which the part
// prepares (tj_recip, within the 2 ulp of the division it replaces: common.cuh).
#pragma once

#include <vector>

#include "compiler/IR.h"

namespace tilejit {

struct HookSplit {
  std::vector<Expr> q_values, kv_values;  // fields of the q / kv part, in first-use order
  std::vector<Expr> q_recips, kv_recips;  // divisors whose reciprocal the q / kv part holds
};

HookSplit split_hook(const Expr& body);

// Whether `div` (an f32 division read by the per-element rest) divides by a reciprocal that a
// part of `split` holds.
bool divides_by_part_recip(const HookSplit& split, const Expr& div);

}  // namespace tilejit
