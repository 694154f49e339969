#include "compiler/Simplify.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/Error.h"
#include "compiler/Interpreter.h"

namespace tilejit {

namespace {

constexpr int32_t kIntMin = std::numeric_limits<int32_t>::min();
constexpr int32_t kIntMax = std::numeric_limits<int32_t>::max();

bool is_const(const Expr& e) {
  return e.op() == Op::ConstBool || e.op() == Op::ConstInt || e.op() == Op::ConstFloat;
}
bool is_int(const Expr& e, int64_t v) { return e.op() == Op::ConstInt && e->ival == v; }
bool is_bool(const Expr& e, bool v) { return e.op() == Op::ConstBool && (e->ival != 0) == v; }
// Float constants compare with their sign: -0.0 and 0.0 are different identities.
bool is_float(const Expr& e, double v) {
  return e.op() == Op::ConstFloat && e->fval == v && std::signbit(e->fval) == std::signbit(v);
}
// The multiplicative unit / its negation in the operand's own type.
bool is_one(const Expr& e) { return is_int(e, 1) || is_float(e, 1.0); }
bool is_minus_one(const Expr& e) { return is_int(e, -1) || is_float(e, -1.0); }
bool is(const Expr& e, Op op) { return e.op() == op; }
// i32 or bool: types where x == x always holds.
bool exact_type(const Expr& e) { return e.type() != Type::F32; }

int32_t wrap(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

Op inverse_comparison(Op op) {
  switch (op) {
    case Op::Eq: return Op::Ne;
    case Op::Ne: return Op::Eq;
    case Op::Lt: return Op::Ge;
    case Op::Le: return Op::Gt;
    case Op::Gt: return Op::Le;
    case Op::Ge: return Op::Lt;
    default: internal_error("{} is not a comparison", op_name(op));
  }
}

// A constant subtree evaluated with the IR's f32 semantics.
Expr fold(const Expr& e) {
  static const EvalContext ctx = [] {
    EvalContext c;
    c.precision = FloatPrecision::F32;
    return c;
  }();
  Value v = evaluate(e, ctx);
  switch (v.type) {
    case Type::Bool: return ir::make_bool(v.b);
    case Type::I32: return ir::make_int(v.i);
    case Type::F32: return ir::make_float(v.f);
  }
  return e;
}

// Rewrites one node whose operands are simplified already. Rules that build new nodes send
// them back through `visit`, so the result is simplified too; every rule makes the expression
// smaller or moves it toward one canonical form, so this terminates.
class Simplifier {
 public:
  Expr visit(const Expr& e) {
    if (e.num_args() == 0) return e;
    if (e.op() != Op::Load && std::all_of(e->args.begin(), e->args.end(), is_const)) return fold(e);
    const std::vector<Expr>& a = e->args;
    switch (e.op()) {
      case Op::Load: return e;
      case Op::Cast: return cast(e, a[0]);
      case Op::Neg: return neg(e, a[0]);
      case Op::Not: return logical_not(e, a[0]);
      case Op::Abs:
        if (is(a[0], Op::Abs) || is(a[0], Op::Neg)) return mk(Op::Abs, {a[0].arg(0)});
        return e;
      case Op::Add: return add(e, a[0], a[1]);
      case Op::Sub: return sub(e, a[0], a[1]);
      case Op::Mul: return mul(e, a[0], a[1]);
      case Op::Div: return div(e, a[0], a[1]);
      case Op::Mod: return mod(e, a[0], a[1]);
      case Op::Min:
      case Op::Max: return min_max(e, a[0], a[1]);
      case Op::And:
      case Op::Or: return and_or(e, a[0], a[1]);
      case Op::Select: return select(e, a[0], a[1], a[2]);
      default: break;
    }
    if (is_comparison(e.op())) return compare(e, a[0], a[1]);
    return e;  // transcendentals: folding only
  }

 private:
  Expr mk(Op op, std::vector<Expr> args) { return visit(ir::make(op, std::move(args))); }
  Expr int_const(int64_t v) { return ir::make_int(wrap(v)); }

  Expr cast(const Expr& e, const Expr& x) {
    if (x.type() == e.type()) return x;
    // A bool widened once and cast again: the bool's 0/1 survives any chain of casts.
    if (is(x, Op::Cast) && x.arg(0).type() == Type::Bool)
      return visit(ir::make_cast(e.type(), x.arg(0)));
    // i32 -> f32 -> bool: f32(i) is zero exactly when i is.
    if (e.type() == Type::Bool && is(x, Op::Cast) && x.arg(0).type() == Type::I32)
      return visit(ir::make_cast(Type::Bool, x.arg(0)));
    return e;
  }

  Expr neg(const Expr& e, const Expr& x) {
    if (is(x, Op::Neg)) return x.arg(0);
    // -(a - b) -> b - a only for i32: for f32, a == b gives -(+0.0) = -0.0 but b - a = +0.0.
    if (is(x, Op::Sub) && x.type() == Type::I32) return mk(Op::Sub, {x.arg(1), x.arg(0)});
    return e;
  }

  Expr logical_not(const Expr& e, const Expr& x) {
    if (is(x, Op::Not)) return x.arg(0);
    // !(a == b) is a != b even for NaN; the ordered comparisons invert only without NaN.
    if (is_comparison(x.op()) && (exact_type(x.arg(0)) || x.op() == Op::Eq || x.op() == Op::Ne))
      return mk(inverse_comparison(x.op()), {x.arg(0), x.arg(1)});
    return e;
  }

  // x + k in i32 with the constants of x merged in (wrapping arithmetic is associative),
  // spelled x - |k| when k is negative.
  Expr add_const(Expr x, int64_t k) {
    if ((is(x, Op::Add) || is(x, Op::Sub)) && x.arg(1).op() == Op::ConstInt) {
      k += is(x, Op::Add) ? x.arg(1)->ival : -x.arg(1)->ival;
      x = x.arg(0);
    }
    int32_t c = wrap(k);
    if (c == 0) return x;
    if (c < 0 && c != kIntMin) return ir::make(Op::Sub, {x, ir::make_int(-c)});
    return ir::make(Op::Add, {x, ir::make_int(c)});
  }

  Expr add(const Expr& e, const Expr& a, const Expr& b) {
    if (e.type() == Type::I32) {
      if (b.op() == Op::ConstInt) return add_const(a, b->ival);
      if (a.op() == Op::ConstInt) return add_const(b, a->ival);
      if (is(a, Op::Sub) && a.arg(1).same_as(b)) return a.arg(0);  // (x - y) + y
      if (is(b, Op::Sub) && b.arg(1).same_as(a)) return b.arg(0);  // y + (x - y)
    } else {
      if (is_float(b, -0.0)) return a;  // x + -0.0 is x for every x, -0.0 included
      if (is_float(a, -0.0)) return b;
      // x + c is x - (-c) exactly (IEEE subtraction adds the negation); spell it so.
      if (b.op() == Op::ConstFloat && std::signbit(b->fval) && !std::isnan(b->fval))
        return ir::make(Op::Sub, {a, ir::make_float(-b->fval)});
    }
    if (is(b, Op::Neg)) return mk(Op::Sub, {a, b.arg(0)});  // IEEE: a - b is a + (-b)
    if (is(a, Op::Neg)) return mk(Op::Sub, {b, a.arg(0)});
    return e;
  }

  Expr sub(const Expr& e, const Expr& a, const Expr& b) {
    if (e.type() == Type::I32) {
      if (a.same_as(b)) return ir::make_int(0);
      if (b.op() == Op::ConstInt) return add_const(a, -b->ival);
      if (is_int(a, 0)) return mk(Op::Neg, {b});
      if (is(a, Op::Add) && a.arg(0).same_as(b)) return a.arg(1);  // (x + y) - x
      if (is(a, Op::Add) && a.arg(1).same_as(b)) return a.arg(0);  // (x + y) - y
    } else {
      if (is_float(b, 0.0)) return a;                  // -0.0 - 0.0 is -0.0
      if (is_float(a, -0.0)) return mk(Op::Neg, {b});  // -0.0 - x is -x, x = +-0.0 too
    }
    if (is(b, Op::Neg)) return mk(Op::Add, {a, b.arg(0)});
    return e;
  }

  Expr mul(const Expr& e, const Expr& a, const Expr& b) {
    if (is_one(b)) return a;
    if (is_one(a)) return b;
    if (is_minus_one(b)) return mk(Op::Neg, {a});
    if (is_minus_one(a)) return mk(Op::Neg, {b});
    if (is(a, Op::Neg) && is(b, Op::Neg)) return mk(Op::Mul, {a.arg(0), b.arg(0)});
    if (e.type() == Type::I32) {
      if (is_int(a, 0) || is_int(b, 0)) return ir::make_int(0);
      if (a.op() == Op::ConstInt) return mk(Op::Mul, {b, a});
      if (b.op() == Op::ConstInt && is(a, Op::Mul) && a.arg(1).op() == Op::ConstInt)
        return mk(Op::Mul, {a.arg(0), int_const(a.arg(1)->ival * b->ival)});
    }
    return e;
  }

  Expr div(const Expr& e, const Expr& a, const Expr& b) {
    if (is_one(b)) return a;
    if (is_minus_one(b)) return mk(Op::Neg, {a});  // i32: INT_MIN / -1 wraps like -INT_MIN
    // (-a) / (-b) is a / b in f32 only: in i32, INT_MIN / 2 is not (-INT_MIN) / (-2).
    if (e.type() == Type::F32 && is(a, Op::Neg) && is(b, Op::Neg))
      return mk(Op::Div, {a.arg(0), b.arg(0)});
    if (e.type() == Type::I32 && (is_int(b, 0) || is_int(a, 0))) return ir::make_int(0);
    return e;
  }

  Expr mod(const Expr& e, const Expr& a, const Expr& b) {
    if (e.type() == Type::I32 &&
        (is_int(b, 0) || is_int(b, 1) || is_int(b, -1) || is_int(a, 0) || a.same_as(b)))
      return ir::make_int(0);
    return e;
  }

  Expr min_max(const Expr& e, const Expr& a, const Expr& b) {
    if (a.same_as(b)) return a;
    if (e.type() != Type::I32) return e;
    bool is_min = is(e, Op::Min);
    if (a.op() == Op::ConstInt) return mk(e.op(), {b, a});
    if (b.op() == Op::ConstInt) {
      int64_t c = b->ival;
      if (c == (is_min ? kIntMax : kIntMin)) return a;  // min(x, INT_MAX), max(x, INT_MIN)
      if (c == (is_min ? kIntMin : kIntMax)) return b;
      if (is(a, e.op()) && a.arg(1).op() == Op::ConstInt) {
        int64_t c0 = a.arg(1)->ival;
        return mk(e.op(), {a.arg(0), ir::make_int(is_min ? std::min(c, c0) : std::max(c, c0))});
      }
    }
    // min(x, max(x, y)) = x and max(x, min(x, y)) = x.
    Op other = is_min ? Op::Max : Op::Min;
    if (is(b, other) && (b.arg(0).same_as(a) || b.arg(1).same_as(a))) return a;
    if (is(a, other) && (a.arg(0).same_as(b) || a.arg(1).same_as(b))) return b;
    return e;
  }

  Expr compare(const Expr& e, const Expr& a, const Expr& b) {
    Op op = e.op();
    if (a.same_as(b) && exact_type(a))
      return ir::make_bool(op == Op::Eq || op == Op::Le || op == Op::Ge);
    if (a.type() == Type::Bool && (op == Op::Eq || op == Op::Ne)) {
      for (int side = 0; side < 2; ++side) {
        const Expr& c = side ? a : b;
        const Expr& x = side ? b : a;
        if (c.op() != Op::ConstBool) continue;
        bool keep = (c->ival != 0) == (op == Op::Eq);  // x == true, x != false
        return keep ? x : mk(Op::Not, {x});
      }
    }
    return e;
  }

  // Whether b is !a, spelled as a Not or as the inverse comparison (which `logical_not`
  // produces only where it is exact).
  static bool complementary(const Expr& a, const Expr& b) {
    if ((is(a, Op::Not) && a.arg(0).same_as(b)) || (is(b, Op::Not) && b.arg(0).same_as(a)))
      return true;
    return is_comparison(a.op()) && is_comparison(b.op()) && b.op() == inverse_comparison(a.op()) &&
           a.arg(0).same_as(b.arg(0)) && a.arg(1).same_as(b.arg(1)) &&
           (exact_type(a.arg(0)) || a.op() == Op::Eq || a.op() == Op::Ne);
  }

  Expr and_or(const Expr& e, const Expr& a, const Expr& b) {
    bool is_and = is(e, Op::And);
    // The absorbing element (false for &&, true for ||) and the neutral one.
    if (is_bool(a, !is_and) || is_bool(b, !is_and)) return ir::make_bool(!is_and);
    if (is_bool(a, is_and)) return b;
    if (is_bool(b, is_and)) return a;
    if (a.same_as(b)) return a;
    if (complementary(a, b)) return ir::make_bool(!is_and);  // x && !x, x || !x
    return e;
  }

  Expr select(const Expr& e, const Expr& c, const Expr& a, const Expr& b) {
    if (c.op() == Op::ConstBool) return c->ival ? a : b;
    if (a.same_as(b)) return a;
    if (is(c, Op::Not)) return mk(Op::Select, {c.arg(0), b, a});
    if (is(a, Op::Select) && a.arg(0).same_as(c)) return mk(Op::Select, {c, a.arg(1), b});
    if (is(b, Op::Select) && b.arg(0).same_as(c)) return mk(Op::Select, {c, a, b.arg(2)});
    if (e.type() == Type::Bool) {
      if (is_bool(a, true)) return mk(Op::Or, {c, b});
      if (is_bool(b, false)) return mk(Op::And, {c, a});
      if (is_bool(a, false)) return mk(Op::And, {mk(Op::Not, {c}), b});
      if (is_bool(b, true)) return mk(Op::Or, {mk(Op::Not, {c}), a});
    }
    return e;
  }
};

// Rebuilds a node over new operands.
Expr with_args(const Expr& old, std::vector<Expr> args) {
  bool same = true;
  for (size_t i = 0; i < args.size(); ++i) same = same && args[i].same_as(old.arg(i));
  if (same) return old;
  switch (old.op()) {
    case Op::Load: return ir::make_load(old->name, old.type(), std::move(args));
    case Op::Cast: return ir::make_cast(old.type(), std::move(args[0]));
    default: return ir::make(old.op(), std::move(args));
  }
}

}  // namespace

Expr simplify(const Expr& e) {
  TILEJIT_INTERNAL_CHECK(e.defined(), "simplifying an undefined expression");
  Simplifier s;
  // One bottom-up sweep reaches a fixed point almost always; a rule that exposes work above
  // it is caught by a few more.
  Expr cur = e;
  for (int round = 0; round < 4; ++round) {
    Expr next = ir::rebuild(cur, [&](const Expr& old, std::vector<Expr> args) {
      return s.visit(with_args(old, std::move(args)));
    });
    if (next.same_as(cur)) break;
    cur = next;
  }
  return cur;
}

AttentionProgram simplify(const AttentionProgram& p) {
  AttentionProgram out = p;
  out.mask = simplify(p.mask);
  out.score = simplify(p.score);
  return out;
}

LossProgram simplify(const LossProgram& p) {
  LossProgram out = p;
  out.logit = simplify(p.logit);
  return out;
}

}  // namespace tilejit
