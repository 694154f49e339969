// Simplification: constant folding and algebraic identities that never change a value.
//
// Folding follows IR.h exactly: i32 wraps, divides truncating, gives 0 for division or modulo
// by zero; each folded f32 operation is computed in fp64 and rounded to f32, which is what f32
// hardware computes for + - * / sqrt and fmod; casts saturate. (It is the interpreter in its
// f32 precision: one definition of the semantics.)
//
// An identity is applied only when it holds for every input, NaN, infinities and -0.0
// included: x * 1 -> x and x - 0.0 -> x for all types, but x + 0 -> x only for i32 (for f32,
// -0.0 + 0.0 is +0.0; x + -0.0 -> x is the exact form); x - x -> 0 and x < x -> false only for
// i32 and bool (NaN); constants are re-associated only in i32 (wrapping arithmetic is
// associative, rounding is not). Dropping a subexpression is allowed: reads have no side effects
// and are defined everywhere (out-of-range reads give 0).
#pragma once

#include "compiler/IR.h"
#include "compiler/Program.h"

namespace tilejit {

Expr simplify(const Expr& e);
// The program with its expressions simplified; declarations are kept as they are (they are the
// binding interface, used or not).
AttentionProgram simplify(const AttentionProgram& p);
LossProgram simplify(const LossProgram& p);

}  // namespace tilejit
