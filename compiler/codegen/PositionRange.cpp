#include "compiler/codegen/PositionRange.h"

#include <algorithm>
#include <limits>

namespace tilejit {

namespace {

constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

std::optional<IntRange> within_i32(IntRange r) {
  if (r.lo < kI32Min || r.hi > kI32Max) return std::nullopt;
  return r;
}

bool is_index_var(const Expr& e) {
  return e.op() == Op::Var &&
         (e->name == var::b || e->name == var::h || e->name == var::q || e->name == var::kv);
}

}  // namespace

std::optional<IntRange> position_range(const Expr& e) {
  if (e.type() != Type::I32) return std::nullopt;
  if (e.op() == Op::ConstInt) return IntRange{e->ival, e->ival};
  if (e.op() == Op::Var) {
    if (!is_index_var(e)) return std::nullopt;
    return IntRange{0, kPositionLimit - 1};
  }
  std::optional<IntRange> a, b;
  if (e.num_args() >= 1) a = position_range(e.arg(0));
  if (e.num_args() >= 2) b = position_range(e.arg(1));
  switch (e.op()) {
    case Op::Neg:
      if (!a) return std::nullopt;
      return within_i32({-a->hi, -a->lo});
    case Op::Add:
      if (!a || !b) return std::nullopt;
      return within_i32({a->lo + b->lo, a->hi + b->hi});
    case Op::Sub:
      if (!a || !b) return std::nullopt;
      return within_i32({a->lo - b->hi, a->hi - b->lo});
    case Op::Mul: {
      if (!a || !b) return std::nullopt;
      // |operands| < 2^31 each: the products fit in int64.
      const int64_t p[] = {a->lo * b->lo, a->lo * b->hi, a->hi * b->lo, a->hi * b->hi};
      return within_i32({*std::min_element(p, p + 4), *std::max_element(p, p + 4)});
    }
    case Op::Min:
      if (!a || !b) return std::nullopt;
      return IntRange{std::min(a->lo, b->lo), std::min(a->hi, b->hi)};
    case Op::Max:
      if (!a || !b) return std::nullopt;
      return IntRange{std::max(a->lo, b->lo), std::max(a->hi, b->hi)};
    default: return std::nullopt;
  }
}

bool small_int_to_float(const Expr& cast) {
  if (cast.op() != Op::Cast || cast.type() != Type::F32 || cast.arg(0).type() != Type::I32)
    return false;
  std::optional<IntRange> r = position_range(cast.arg(0));
  return r && r->lo >= -(int64_t{1} << 22) && r->hi <= (int64_t{1} << 22);
}

}  // namespace tilejit
