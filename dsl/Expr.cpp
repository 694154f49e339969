#include "dsl/Expr.h"

#include <limits>

#include "compiler/Error.h"
#include "compiler/Printer.h"

namespace tilejit {

Expr lit(bool v) { return ir::make_bool(v); }
Expr lit(int v) { return ir::make_int(v); }
Expr lit(int64_t v) {
  TILEJIT_USER_CHECK(v >= std::numeric_limits<int32_t>::min() &&
                         v <= std::numeric_limits<int32_t>::max(),
                     "integer literal {} does not fit in i32", v);
  return ir::make_int(v);
}
Expr lit(double v) { return ir::make_float(v); }

namespace {

void check_defined(const Expr& e, Op op) {
  TILEJIT_USER_CHECK(e.defined(), "operand of '{}' is an undefined expression", op_spelling(op));
}

bool numeric(const Expr& e) { return e.type() != Type::Bool; }

// Promote two numeric operands to a common type (i32 op f32 -> f32).
void promote(Expr& a, Expr& b) {
  if (a.type() == b.type()) return;
  if (a.type() == Type::I32 && b.type() == Type::F32) a = ir::make_cast(Type::F32, a);
  if (b.type() == Type::I32 && a.type() == Type::F32) b = ir::make_cast(Type::F32, b);
}

[[noreturn]] void bad_operands(Op op, const std::vector<Expr>& args, std::string_view want) {
  std::string shown;
  for (const Expr& a : args) {
    if (!shown.empty()) shown += ", ";
    shown += fmt::format("{} : {}", print_expr(a), type_name(a.type()));
  }
  user_error("operator '{}' needs {} operands, got ({})", op_spelling(op), want, shown);
}

}  // namespace

Expr apply(Op op, const std::vector<Expr>& in) {
  std::vector<Expr> args = in;
  for (const Expr& a : args) check_defined(a, op);
  int arity = op_arity(op);
  TILEJIT_USER_CHECK(arity < 0 || static_cast<int>(args.size()) == arity,
                     "'{}' takes {} operands, got {}", op_spelling(op), arity, args.size());
  switch (op) {
    case Op::Not:
      if (args[0].type() != Type::Bool) bad_operands(op, args, "bool");
      return ir::make(op, args);
    case Op::And:
    case Op::Or:
      if (args[0].type() != Type::Bool || args[1].type() != Type::Bool)
        bad_operands(op, args, "bool");
      return ir::make(op, args);
    case Op::Neg:
    case Op::Abs:
      if (!numeric(args[0])) bad_operands(op, args, "numeric");
      return ir::make(op, args);
    case Op::Eq:
    case Op::Ne:
      if (numeric(args[0]) != numeric(args[1])) bad_operands(op, args, "two numeric or two bool");
      promote(args[0], args[1]);
      return ir::make(op, args);
    case Op::Select:
      if (args[0].type() != Type::Bool) bad_operands(op, args, "a bool condition and two value");
      if (numeric(args[1]) != numeric(args[2]))
        bad_operands(op, args, "a bool condition and two same-kind value");
      promote(args[1], args[2]);
      return ir::make(op, args);
    default:
      break;
  }
  if (is_transcendental(op)) {
    if (!numeric(args[0])) bad_operands(op, args, "numeric");
    if (args[0].type() == Type::I32) args[0] = ir::make_cast(Type::F32, args[0]);
    return ir::make(op, args);
  }
  // Arithmetic, min/max and ordered comparisons: numeric operands, promoted.
  if (!numeric(args[0]) || !numeric(args[1])) bad_operands(op, args, "numeric");
  promote(args[0], args[1]);
  return ir::make(op, args);
}

#define TILEJIT_DSL_BINARY(fn, op) \
  Expr fn(const Expr& a, const Expr& b) { return apply(Op::op, {a, b}); }
TILEJIT_DSL_BINARY(operator+, Add)
TILEJIT_DSL_BINARY(operator-, Sub)
TILEJIT_DSL_BINARY(operator*, Mul)
TILEJIT_DSL_BINARY(operator/, Div)
TILEJIT_DSL_BINARY(operator%, Mod)
TILEJIT_DSL_BINARY(operator==, Eq)
TILEJIT_DSL_BINARY(operator!=, Ne)
TILEJIT_DSL_BINARY(operator<, Lt)
TILEJIT_DSL_BINARY(operator<=, Le)
TILEJIT_DSL_BINARY(operator>, Gt)
TILEJIT_DSL_BINARY(operator>=, Ge)
TILEJIT_DSL_BINARY(min, Min)
TILEJIT_DSL_BINARY(max, Max)
TILEJIT_DSL_BINARY(operator&&, And)
TILEJIT_DSL_BINARY(operator||, Or)
#undef TILEJIT_DSL_BINARY

Expr operator!(const Expr& a) { return apply(Op::Not, {a}); }
Expr operator-(const Expr& a) { return apply(Op::Neg, {a}); }
Expr abs(const Expr& a) { return apply(Op::Abs, {a}); }
Expr exp(const Expr& a) { return apply(Op::Exp, {a}); }
Expr exp2(const Expr& a) { return apply(Op::Exp2, {a}); }
Expr log(const Expr& a) { return apply(Op::Log, {a}); }
Expr log2(const Expr& a) { return apply(Op::Log2, {a}); }
Expr tanh(const Expr& a) { return apply(Op::Tanh, {a}); }
Expr sqrt(const Expr& a) { return apply(Op::Sqrt, {a}); }
Expr rsqrt(const Expr& a) { return apply(Op::Rsqrt, {a}); }
Expr select(const Expr& c, const Expr& a, const Expr& b) { return apply(Op::Select, {c, a, b}); }

Expr cast(Type to, const Expr& a) {
  check_defined(a, Op::Cast);
  if (a.type() == to) return a;
  return ir::make_cast(to, a);
}

namespace dsl {

const Expr b = ir::make_var(var::b);
const Expr h = ir::make_var(var::h);
const Expr q = ir::make_var(var::q);
const Expr kv = ir::make_var(var::kv);
const Expr row = ir::make_var(var::row);
const Expr id = ir::make_var(var::id);
const Expr score = ir::make_var(var::score);
const Expr logit = ir::make_var(var::logit);

Buffer::Buffer(std::string name, ElemType elem, std::vector<std::string> dims)
    : name_(std::move(name)), elem_(elem), dims_(std::move(dims)) {
  TILEJIT_USER_CHECK(!name_.empty(), "a buffer needs a name");
  TILEJIT_USER_CHECK(!dims_.empty(), "buffer '{}' needs at least one dimension", name_);
}

Expr Buffer::read(std::vector<Expr> indices) const {
  TILEJIT_USER_CHECK(indices.size() == dims_.size(),
                     "buffer '{}' has {} dimensions but is indexed with {}", name_, dims_.size(),
                     indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    TILEJIT_USER_CHECK(indices[i].defined(), "index {} of '{}' is undefined", i, name_);
    TILEJIT_USER_CHECK(indices[i].type() == Type::I32,
                       "index {} of '{}' must be i32, got {} : {}", i, name_,
                       print_expr(indices[i]), type_name(indices[i].type()));
  }
  return ir::make_load(name_, value_type(elem_), std::move(indices));
}

Param::Param(std::string name, Type type)
    : name_(std::move(name)), type_(type), expr_(ir::make_param(name_, type)) {
  TILEJIT_USER_CHECK(!name_.empty(), "a param needs a name");
  TILEJIT_USER_CHECK(type != Type::Bool, "param '{}' must be f32 or i32", name_);
}

}  // namespace dsl
}  // namespace tilejit
