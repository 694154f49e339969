// Symbolic differentiation of an f32 expression with respect to an f32 variable (score or
// logit): the backward kernels need d score_mod / d score and d logit_mod / d logit.
//
// Every node has a rule. Integer, bool and Load nodes, params and casts from i32/bool are
// constant in the variable (derivative 0). Select differentiates both branches under the same
// condition; min/max take the derivative of the operand they return (select(m == a, da, db)
// with m the min/max node: exact for fmin/fmax, whose NaN operand yields the other one);
// abs gives select(x < 0, -dx, dx). The rules reuse the node being differentiated where the
// derivative contains it: tanh -> (1 - t*t) dx with t the tanh node itself, exp -> e dx,
// exp2 -> e ln2 dx, sqrt -> 0.5 / s dx, rsqrt -> -0.5 r / x dx, a / b -> (da - q db) / b with
// q the quotient. fmod(a, b) = a - trunc(a/b) b gives da - trunc(a/b) db, with trunc(a/b)
// spelled (a - fmod(a, b)) / b (there is no f32 trunc in the IR). At points where a function is
// not differentiable (abs at 0, min/max at ties, fmod at its jumps) one side's derivative is
// returned. The result is simplified.
#pragma once

#include <string_view>

#include "compiler/IR.h"

namespace tilejit {

Expr differentiate(const Expr& e, std::string_view var);

}  // namespace tilejit
