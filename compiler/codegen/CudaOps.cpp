#include "compiler/codegen/CudaOps.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "compiler/Error.h"
#include "compiler/Printer.h"

namespace tilejit::cuda {

namespace {

// Spelling of an operator over operands of one type. {0}, {1}, {2} are the operands. An op with
// no row for a type is not valid for it (the validator rejects such programs).
struct OpSpelling {
  Op op;
  Type operands;
  std::string_view pattern;
};

constexpr OpSpelling kSpellings[] = {
    {Op::Neg, Type::I32, "tj_neg({0})"},
    {Op::Neg, Type::F32, "-{0}"},
    {Op::Not, Type::Bool, "!{0}"},
    {Op::Abs, Type::I32, "tj_abs({0})"},
    {Op::Abs, Type::F32, "fabsf({0})"},
    {Op::Exp, Type::F32, "tj_exp({0})"},
    {Op::Exp2, Type::F32, "tj_exp2({0})"},
    {Op::Log, Type::F32, "tj_log({0})"},
    {Op::Log2, Type::F32, "tj_log2({0})"},
    {Op::Tanh, Type::F32, "tj_tanh({0})"},
    {Op::Sqrt, Type::F32, "sqrtf({0})"},
    {Op::Rsqrt, Type::F32, "tj_rsqrt({0})"},
    {Op::Add, Type::I32, "tj_add({0}, {1})"},
    {Op::Add, Type::F32, "{0} + {1}"},
    {Op::Sub, Type::I32, "tj_sub({0}, {1})"},
    {Op::Sub, Type::F32, "{0} - {1}"},
    {Op::Mul, Type::I32, "tj_mul({0}, {1})"},
    {Op::Mul, Type::F32, "{0} * {1}"},
    {Op::Div, Type::I32, "tj_div({0}, {1})"},
    {Op::Div, Type::F32, "tj_fdiv({0}, {1})"},
    {Op::Mod, Type::I32, "tj_mod({0}, {1})"},
    {Op::Mod, Type::F32, "fmodf({0}, {1})"},
    {Op::Min, Type::I32, "tj_min({0}, {1})"},
    {Op::Min, Type::F32, "fminf({0}, {1})"},
    {Op::Max, Type::I32, "tj_max({0}, {1})"},
    {Op::Max, Type::F32, "fmaxf({0}, {1})"},
    {Op::And, Type::Bool, "{0} && {1}"},
    {Op::Or, Type::Bool, "{0} || {1}"},
    {Op::Select, Type::Bool, "{0} ? {1} : {2}"},
};

// Comparisons read the same for every operand type.
std::string_view comparison(Op op) {
  switch (op) {
    case Op::Eq: return "{0} == {1}";
    case Op::Ne: return "{0} != {1}";
    case Op::Lt: return "{0} < {1}";
    case Op::Le: return "{0} <= {1}";
    case Op::Gt: return "{0} > {1}";
    case Op::Ge: return "{0} >= {1}";
    default: return {};
  }
}

// Casts, by (from, to). Same-type casts are the identity.
std::string_view cast(Type from, Type to) {
  if (from == to) return "{0}";
  switch (to) {
    case Type::Bool: return from == Type::F32 ? "{0} != 0.0f" : "{0} != 0";
    case Type::I32: return from == Type::F32 ? "tj_f2i({0})" : "static_cast<int>({0})";
    case Type::F32: return "static_cast<float>({0})";
  }
  return {};
}

std::string apply(std::string_view pattern, const std::vector<std::string>& a) {
  switch (a.size()) {
    case 1: return fmt::format(fmt::runtime(pattern), a[0]);
    case 2: return fmt::format(fmt::runtime(pattern), a[0], a[1]);
    case 3: return fmt::format(fmt::runtime(pattern), a[0], a[1], a[2]);
  }
  internal_error("no CUDA spelling with {} operands", a.size());
}

std::string float_constant(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fffffff)";
  if (std::isinf(v)) return v < 0 ? "(-__int_as_float(0x7f800000))" : "__int_as_float(0x7f800000)";
  std::string s = format_f32(v) + "f";
  return s[0] == '-' ? "(" + s + ")" : s;
}

}  // namespace

std::string_view type_spelling(Type t) {
  switch (t) {
    case Type::Bool: return "bool";
    case Type::I32: return "int";
    case Type::F32: return "float";
  }
  return "?";
}

std::string constant(const Expr& e) {
  switch (e.op()) {
    case Op::ConstBool: return e->ival ? "true" : "false";
    case Op::ConstInt:
      if (e->ival == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
      return e->ival < 0 ? fmt::format("({})", e->ival) : std::to_string(e->ival);
    case Op::ConstFloat: return float_constant(e->fval);
    default: internal_error("{} is not a constant", op_name(e.op()));
  }
}

std::string render(const Expr& e, const std::vector<std::string>& args, std::string_view field) {
  const Op op = e.op();
  switch (op) {
    case Op::ConstBool:
    case Op::ConstInt:
    case Op::ConstFloat: return constant(e);
    case Op::Var: return e->name;
    case Op::Param: return fmt::format("a.{}", field);
    case Op::Load:
      return args.empty() ? fmt::format("tj_load(a.{})", field)
                          : fmt::format("tj_load(a.{}, {})", field, fmt::join(args, ", "));
    case Op::Cast: return apply(cast(e.arg(0).type(), e.type()), args);
    default: break;
  }
  if (is_comparison(op)) return apply(comparison(op), args);
  // Select is spelled by its arms' type; everything else by its first operand's.
  const Type operands = op == Op::Select ? Type::Bool : e.arg(0).type();
  for (const OpSpelling& s : kSpellings)
    if (s.op == op && (s.operands == operands)) return apply(s.pattern, args);
  internal_error("no CUDA spelling for {} on {}", op_name(op), type_name(operands));
}

}  // namespace tilejit::cuda
