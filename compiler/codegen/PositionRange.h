// Ranges of i32 expressions over bounded positions, for code generation: when b, h, q and kv
// all lie in [0, kPositionLimit) -- the runtime picks kernels generated under that assumption
// only for problems that small, and kernels without it otherwise -- an i32 expression built
// from them and constants by + - * min max keeps to an interval, and an f32 cast of a value
// within +-2^22 can be computed with an integer add and a float subtraction (tj_i2f_small in
// kernels_templates/common.cuh) instead of the conversion unit, bit for bit the same.
#pragma once

#include <cstdint>
#include <optional>

#include "compiler/IR.h"

namespace tilejit {

// 2^22 = 4,194,304: positions (including a kernel's padding past the last tile) and the batch
// and head indices stay below it.
inline constexpr int64_t kPositionLimit = int64_t{1} << 22;

struct IntRange {
  int64_t lo = 0, hi = 0;
};

// The range of an i32 expression when every index variable lies in [0, kPositionLimit); empty
// when it reads anything else (a param, a buffer, a division, ...) or an intermediate value could
// leave i32 (and wrap).
std::optional<IntRange> position_range(const Expr& e);

// Whether `cast` is an i32 -> f32 cast whose operand provably lies in [-2^22, 2^22].
bool small_int_to_float(const Expr& cast);

}  // namespace tilejit
