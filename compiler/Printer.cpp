#include "compiler/Printer.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "compiler/Error.h"
#include "compiler/Sha256.h"

namespace tilejit {

std::string format_f32(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  // Shortest text that reads back to the same f32.
  auto res = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_f64(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

namespace {

// Binding strength of infix operators (higher binds tighter); atoms and calls are 100.
int precedence(const Expr& e) {
  switch (e.op()) {
    case Op::Or: return 1;
    case Op::And: return 2;
    case Op::Eq: case Op::Ne: return 3;
    case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: return 4;
    case Op::Add: case Op::Sub: return 5;
    case Op::Mul: case Op::Div: case Op::Mod: return 6;
    case Op::Neg: case Op::Not: return 7;
    case Op::ConstInt: return e->ival < 0 ? 7 : 100;
    case Op::ConstFloat: return std::signbit(e->fval) ? 7 : 100;
    default: return 100;
  }
}

bool is_infix(Op op) {
  return (op >= Op::Add && op <= Op::Mod) || (op >= Op::Eq && op <= Op::Or);
}

std::string print(const Expr& e);

std::string print_operand(const Expr& child, int min_prec) {
  std::string s = print(child);
  return precedence(child) < min_prec ? "(" + s + ")" : s;
}

std::string call(std::string_view fn, const Expr& e) {
  std::string s(fn);
  s += '(';
  for (size_t i = 0; i < e.num_args(); ++i) {
    if (i) s += ", ";
    s += print(e.arg(i));
  }
  return s + ')';
}

std::string print(const Expr& e) {
  TILEJIT_INTERNAL_CHECK(e.defined(), "printing an undefined expression");
  const Node& n = *e;
  switch (n.op) {
    case Op::ConstBool: return n.ival ? "true" : "false";
    case Op::ConstInt: return std::to_string(n.ival);
    case Op::ConstFloat: return format_f32(n.fval);
    case Op::Var:
    case Op::Param: return n.name;
    case Op::Load: {
      std::string s = n.name + '[';
      for (size_t i = 0; i < n.args.size(); ++i) {
        if (i) s += ", ";
        s += print(n.args[i]);
      }
      return s + ']';
    }
    case Op::Cast: return call(type_name(n.type), e);
    case Op::Neg:
    case Op::Not: {
      // A negative literal after unary minus must keep its own parentheses: "-(-1)", and a
      // positive literal too ("-(1)"), since "-1" reads back as the literal -1.
      const Expr& a = n.args[0];
      bool literal = a.op() == Op::ConstInt || a.op() == Op::ConstFloat;
      std::string inner = print_operand(a, 8);
      if (literal && inner.front() != '(') inner = "(" + inner + ")";
      return std::string(op_spelling(n.op)) + inner;
    }
    default: break;
  }
  if (is_infix(n.op)) {
    int p = precedence(e);
    // Left-associative: the right operand needs parentheses at equal precedence.
    return print_operand(n.args[0], p) + ' ' + std::string(op_spelling(n.op)) + ' ' +
           print_operand(n.args[1], p + 1);
  }
  return call(op_spelling(n.op), e);  // abs, exp, ..., min, max, select
}

std::string print_decls(const std::vector<BufferDecl>& buffers,
                        const std::vector<ParamDecl>& params) {
  std::string s;
  for (const BufferDecl& b : buffers)
    s += fmt::format("  buffer {} : {}[{}]\n", b.name, elem_type_name(b.elem),
                     fmt::join(b.dims, ", "));
  for (const ParamDecl& p : params) s += fmt::format("  param {} : {}\n", p.name, type_name(p.type));
  return s;
}

std::string print_segment(std::string_view keyword, const Segment& s) {
  std::string line = fmt::format("  {} {} : [{}, {}) weight {}", keyword, s.name, s.begin, s.end,
                                 s.weight);
  if (!s.bias.empty()) line += " bias " + s.bias;
  return line + "\n";
}

}  // namespace

std::string print_expr(const Expr& e) { return print(e); }

std::string print_program(const AttentionProgram& p) {
  std::string s = fmt::format("attention {} {{\n", p.name);
  s += print_decls(p.buffers, p.params);
  s += "  mask = " + print(p.mask) + "\n";
  s += "  score = " + print(p.score) + "\n";
  return s + "}\n";
}

std::string print_program(const LossProgram& p) {
  std::string s = fmt::format("loss {} {{\n", p.name);
  s += print_decls(p.buffers, p.params);
  for (const Segment& seg : p.segments) s += print_segment("segment", seg);
  s += "  logit = " + print(p.logit) + "\n";
  s += "  label_smoothing = " + format_f64(p.label_smoothing) + "\n";
  s += "  z_loss = " + format_f64(p.z_loss) + "\n";
  if (p.kl) {
    s += fmt::format("  kl alpha = {} temperature = {}\n", format_f64(p.kl->alpha),
                     format_f64(p.kl->temperature));
    for (const Segment& seg : p.kl->teacher_segments) s += print_segment("teacher segment", seg);
  }
  s += fmt::format("  ignore_index = {}\n", p.ignore_index);
  s += fmt::format("  reduction = {}\n", reduction_name(p.reduction));
  return s + "}\n";
}

std::string program_hash(const AttentionProgram& p) { return sha256_hex(print_program(p)); }
std::string program_hash(const LossProgram& p) { return sha256_hex(print_program(p)); }

}  // namespace tilejit
