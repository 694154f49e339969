#include "compiler/Differentiate.h"

#include <numbers>
#include <unordered_map>

#include "compiler/Error.h"
#include "compiler/Simplify.h"

namespace tilejit {

namespace {

// Forward-mode differentiation over the DAG, each node once. A zero derivative is an undefined
// Expr, so the chain rule prunes whole subtrees that do not depend on the variable.
class Differentiator {
 public:
  explicit Differentiator(std::string_view var) : var_(var) {}

  Expr d(const Expr& e) {
    if (e.type() != Type::F32) return {};  // i32 and bool nodes are piecewise constant
    auto it = memo_.find(e.get());
    if (it != memo_.end()) return it->second;
    Expr r = rule(e);
    memo_.emplace(e.get(), r);
    return r;
  }

 private:
  static Expr f(double v) { return ir::make_float(v); }
  static Expr op(Op o, Expr a, Expr b) { return ir::make(o, {std::move(a), std::move(b)}); }
  static Expr neg(Expr a) { return ir::make(Op::Neg, {std::move(a)}); }

  // Arithmetic on derivatives, where undefined means 0.
  static Expr add(Expr a, Expr b) {
    if (!a.defined()) return b;
    if (!b.defined()) return a;
    return op(Op::Add, std::move(a), std::move(b));
  }
  static Expr sub(Expr a, Expr b) {
    if (!b.defined()) return a;
    if (!a.defined()) return neg(std::move(b));
    return op(Op::Sub, std::move(a), std::move(b));
  }
  static bool is_zero(const Expr& d) {
    return !d.defined() || (d.op() == Op::ConstFloat && d->fval == 0);
  }
  // factor * da, where factor is an ordinary expression. A piecewise derivative keeps its zero
  // pieces zero: factor * select(c, 0, x) becomes select(c, 0, factor * x), so an infinite
  // factor (sqrt' at 0, 1/x at 0) does not turn a constant piece into NaN.
  static Expr scale(const Expr& factor, const Expr& da) {
    if (is_zero(da)) return {};
    if (da.op() == Op::Select)
      return choose(da.arg(0), scale(factor, da.arg(1)), scale(factor, da.arg(2)));
    return op(Op::Mul, factor, da);
  }
  // da / divisor, with the same care for zero pieces.
  static Expr divide(const Expr& da, const Expr& divisor) {
    if (is_zero(da)) return {};
    if (da.op() == Op::Select)
      return choose(da.arg(0), divide(da.arg(1), divisor), divide(da.arg(2), divisor));
    return op(Op::Div, da, divisor);
  }
  static Expr zero_if_undefined(Expr a) { return a.defined() ? a : f(0.0); }
  static Expr choose(const Expr& cond, Expr a, Expr b) {
    if (is_zero(a) && is_zero(b)) return {};
    return ir::make(Op::Select,
                    {cond, zero_if_undefined(std::move(a)), zero_if_undefined(std::move(b))});
  }

  Expr rule(const Expr& e) {
    const Node& n = *e;
    switch (n.op) {
      case Op::Var: return n.name == var_ ? f(1.0) : Expr();
      case Op::ConstFloat:
      case Op::Param:
      case Op::Load: return {};
      case Op::Cast:  // from i32 or bool: constant; an f32 -> f32 cast is the identity
        return n.args[0].type() == Type::F32 ? d(n.args[0]) : Expr();
      default: break;
    }
    const Expr& a = n.args[0];
    Expr da = d(a);
    switch (n.op) {
      case Op::Neg: return da.defined() ? neg(da) : Expr();
      case Op::Abs: return da.defined() ? choose(op(Op::Lt, a, f(0.0)), neg(da), da) : Expr();
      case Op::Exp: return scale(e, da);
      case Op::Exp2: return scale(op(Op::Mul, e, f(std::numbers::ln2)), da);
      case Op::Log: return divide(da, a);
      case Op::Log2: return divide(da, op(Op::Mul, a, f(std::numbers::ln2)));
      case Op::Tanh: return scale(op(Op::Sub, f(1.0), op(Op::Mul, e, e)), da);
      case Op::Sqrt: return scale(op(Op::Div, f(0.5), e), da);
      case Op::Rsqrt: return scale(op(Op::Div, op(Op::Mul, f(-0.5), e), a), da);
      case Op::Select: return choose(a, d(n.args[1]), d(n.args[2]));
      default: break;
    }
    const Expr& b = n.args[1];
    Expr db = d(b);
    switch (n.op) {
      case Op::Add: return add(da, db);
      case Op::Sub: return sub(da, db);
      case Op::Mul: return add(scale(b, da), scale(a, db));
      case Op::Div:
        // d(a/b) = (da - (a/b) db) / b, reusing the quotient node.
        return divide(sub(da, scale(e, db)), b);
      case Op::Mod: {
        // fmod(a, b) = a - trunc(a/b) b, and trunc(a/b) = (a - fmod(a, b)) / b.
        Expr trunc_quotient = op(Op::Div, op(Op::Sub, a, e), b);
        return sub(da, scale(trunc_quotient, db));
      }
      // min/max are fmin/fmax: a NaN operand yields the other one, so "a <= b" would pick
      // the wrong branch there. Asking which operand the result is picks right everywhere.
      case Op::Min:
      case Op::Max: return choose(op(Op::Eq, e, a), da, db);
      default: internal_error("no derivative rule for {} of type f32", op_name(n.op));
    }
  }

  std::string_view var_;
  std::unordered_map<const Node*, Expr> memo_;
};

}  // namespace

Expr differentiate(const Expr& e, std::string_view var) {
  TILEJIT_INTERNAL_CHECK(e.defined(), "differentiating an undefined expression");
  TILEJIT_INTERNAL_CHECK(var == var::score || var == var::logit,
                         "can only differentiate with respect to an f32 variable, not '{}'", var);
  TILEJIT_INTERNAL_CHECK(e.type() == Type::F32, "differentiating a {} expression",
                         type_name(e.type()));
  Expr de = Differentiator(var).d(e);
  return simplify(de.defined() ? de : ir::make_float(0.0));
}

}  // namespace tilejit
