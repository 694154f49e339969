#include "compiler/Interpreter.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "compiler/Error.h"
#include "compiler/Printer.h"

namespace tilejit {

double Value::as_double() const {
  switch (type) {
    case Type::Bool: return b ? 1.0 : 0.0;
    case Type::I32: return i;
    case Type::F32: return f;
  }
  return 0;
}

namespace {

// ---- The scalar semantics of IR.h, shared by `evaluate` and `CompiledEval`. ----

int32_t wrap(uint32_t v) { return static_cast<int32_t>(v); }

int32_t int_unary(Op op, int32_t a) {
  switch (op) {
    case Op::Neg: return wrap(0u - static_cast<uint32_t>(a));
    case Op::Abs: return a < 0 ? wrap(0u - static_cast<uint32_t>(a)) : a;
    default: internal_error("{} is not an i32 unary operation", op_name(op));
  }
}

int32_t int_binary(Op op, int32_t a, int32_t b) {
  uint32_t ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
  switch (op) {
    case Op::Add: return wrap(ua + ub);
    case Op::Sub: return wrap(ua - ub);
    case Op::Mul: return wrap(ua * ub);
    case Op::Div:
      if (b == 0) return 0;
      if (b == -1) return wrap(0u - ua);  // INT_MIN / -1 wraps
      return a / b;
    case Op::Mod:
      if (b == 0 || b == -1) return 0;
      return a % b;
    case Op::Min: return a < b ? a : b;
    case Op::Max: return a > b ? a : b;
    default: internal_error("{} is not an i32 binary operation", op_name(op));
  }
}

double float_unary(Op op, double a) {
  switch (op) {
    case Op::Neg: return -a;
    case Op::Abs: return std::fabs(a);
    case Op::Exp: return std::exp(a);
    case Op::Exp2: return std::exp2(a);
    case Op::Log: return std::log(a);
    case Op::Log2: return std::log2(a);
    case Op::Tanh: return std::tanh(a);
    case Op::Sqrt: return std::sqrt(a);
    case Op::Rsqrt: return 1.0 / std::sqrt(a);
    default: internal_error("{} is not an f32 unary operation", op_name(op));
  }
}

double float_binary(Op op, double a, double b) {
  switch (op) {
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Mod: return std::fmod(a, b);
    case Op::Min: return std::fmin(a, b);
    case Op::Max: return std::fmax(a, b);
    default: internal_error("{} is not an f32 binary operation", op_name(op));
  }
}

template <typename T>
bool compare(Op op, T a, T b) {
  switch (op) {
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    case Op::Lt: return a < b;
    case Op::Le: return a <= b;
    case Op::Gt: return a > b;
    case Op::Ge: return a >= b;
    default: internal_error("{} is not a comparison", op_name(op));
  }
}

// f32 -> i32: truncate toward zero, saturate, NaN -> 0.
int32_t float_to_int(double f) {
  if (std::isnan(f)) return 0;
  if (f >= 2147483648.0) return std::numeric_limits<int32_t>::max();
  if (f <= -2147483649.0) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(f);
}

double round_f32(double v) { return static_cast<double>(static_cast<float>(v)); }

double decode_f16(uint16_t h) {
  int sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0)
    v = std::ldexp(mantissa, -24);  // zero and subnormals
  else if (exponent == 31)
    v = mantissa ? std::numeric_limits<double>::quiet_NaN()
                 : std::numeric_limits<double>::infinity();
  else
    v = std::ldexp(mantissa + 1024, exponent - 25);
  return sign ? -v : v;
}

double decode_bf16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Reads element `index` (already in i32) of `view`; 0 outside the bound shape.
template <typename IndexAt>
Value read_element(const BufferView& view, size_t rank, IndexAt index_at) {
  int64_t offset = 0, stride = 1;
  for (size_t d = rank; d-- > 0;) {
    int64_t i = index_at(d);
    if (i < 0 || i >= view.sizes[d])
      return view.elem == ElemType::I32 ? Value::of_int(0) : Value::of_float(0.0);
    offset += i * (view.strides.empty() ? stride : view.strides[d]);
    stride *= view.sizes[d];
  }
  const char* p = static_cast<const char*>(view.data) + offset * elem_size(view.elem);
  switch (view.elem) {
    case ElemType::I32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      return Value::of_int(v);
    }
    case ElemType::F32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return Value::of_float(v);
    }
    case ElemType::BF16:
    case ElemType::F16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof v);
      return Value::of_float(view.elem == ElemType::BF16 ? decode_bf16(v) : decode_f16(v));
    }
  }
  return Value::of_int(0);
}

const BufferView& find_buffer(const Expr& load, const EvalContext& ctx) {
  auto it = ctx.buffers.find(load->name);
  TILEJIT_USER_CHECK(it != ctx.buffers.end(), "no buffer bound for '{}' read in `{}`", load->name,
                     print_expr(load));
  const BufferView& v = it->second;
  TILEJIT_USER_CHECK(value_type(v.elem) == load.type(),
                     "buffer '{}' is bound as {} but read as {} in `{}`", load->name,
                     elem_type_name(v.elem), type_name(load.type()), print_expr(load));
  TILEJIT_USER_CHECK(v.sizes.size() == load.num_args() &&
                         (v.strides.empty() || v.strides.size() == v.sizes.size()),
                     "buffer '{}' is bound with rank {} but read with {} indices in `{}`",
                     load->name, v.sizes.size(), load.num_args(), print_expr(load));
  return v;
}

// The bound value of a param, converted to the param's type.
Value param_value(const Expr& p, const EvalContext& ctx) {
  auto it = ctx.params.find(p->name);
  TILEJIT_USER_CHECK(it != ctx.params.end(), "no value bound for param '{}'", p->name);
  if (p.type() == Type::I32) {
    const int64_t* v = std::get_if<int64_t>(&it->second);
    TILEJIT_USER_CHECK(v != nullptr, "param '{}' is i32 but bound to a float", p->name);
    return Value::of_int(wrap(static_cast<uint32_t>(*v)));
  }
  double v = std::holds_alternative<double>(it->second)
                 ? std::get<double>(it->second)
                 : static_cast<double>(std::get<int64_t>(it->second));
  return Value::of_float(round_f32(v));
}

Value cast_value(Type to, const Value& a) {
  switch (to) {
    case Type::Bool:
      return Value::of_bool(a.type == Type::Bool ? a.b : a.type == Type::I32 ? a.i != 0 : a.f != 0);
    case Type::I32:
      return Value::of_int(a.type == Type::Bool  ? a.b
                           : a.type == Type::I32 ? a.i
                                                 : float_to_int(a.f));
    case Type::F32: return Value::of_float(a.as_double());
  }
  return a;
}

int32_t index_var(const Expr& v, const EvalContext& ctx) {
  const std::string& n = v->name;
  int64_t x;
  if (n == var::b)
    x = ctx.b;
  else if (n == var::h)
    x = ctx.h;
  else if (n == var::q)
    x = ctx.q;
  else if (n == var::kv)
    x = ctx.kv;
  else if (n == var::row)
    x = ctx.row;
  else if (n == var::id)
    x = ctx.id;
  else
    internal_error("unknown variable '{}'", n);
  return wrap(static_cast<uint32_t>(x));
}

// The recursive reference evaluator, memoized per node so shared subexpressions are evaluated
// once; Select recurses only into the chosen operand.
class Evaluator {
 public:
  explicit Evaluator(const EvalContext& ctx)
      : ctx_(ctx), f32_(ctx.precision == FloatPrecision::F32) {}

  Value eval(const Expr& e) {
    if (e.num_args() == 0) return leaf(e);
    auto it = memo_.find(e.get());
    if (it != memo_.end()) return it->second;
    Value v = node(e);
    if (v.type == Type::F32 && f32_) v.f = round_f32(v.f);
    memo_.emplace(e.get(), v);
    return v;
  }

 private:
  Value leaf(const Expr& e) {
    const Node& n = *e;
    switch (n.op) {
      case Op::ConstBool: return Value::of_bool(n.ival != 0);
      case Op::ConstInt: return Value::of_int(static_cast<int32_t>(n.ival));
      case Op::ConstFloat: return Value::of_float(n.fval);
      case Op::Param: return param_value(e, ctx_);
      case Op::Var:
        if (n.type == Type::F32) {
          double v = n.name == var::score ? ctx_.score : ctx_.logit;
          return Value::of_float(f32_ ? round_f32(v) : v);
        }
        return Value::of_int(index_var(e, ctx_));
      default: internal_error("{} has no operands", op_name(n.op));
    }
  }

  Value node(const Expr& e) {
    const Node& n = *e;
    switch (n.op) {
      case Op::Load: {
        const BufferView& view = find_buffer(e, ctx_);
        std::vector<int32_t> ix;
        for (const Expr& a : n.args) ix.push_back(eval(a).i);
        return read_element(view, ix.size(), [&](size_t d) { return ix[d]; });
      }
      case Op::Cast: return cast_value(n.type, eval(n.args[0]));
      case Op::Not: return Value::of_bool(!eval(n.args[0]).b);
      case Op::And: return Value::of_bool(eval(n.args[0]).b && eval(n.args[1]).b);
      case Op::Or: return Value::of_bool(eval(n.args[0]).b || eval(n.args[1]).b);
      case Op::Select: return eval(n.args[0]).b ? eval(n.args[1]) : eval(n.args[2]);
      default: break;
    }
    if (n.args.size() == 1) {
      Value a = eval(n.args[0]);
      return n.type == Type::I32 ? Value::of_int(int_unary(n.op, a.i))
                                 : Value::of_float(float_unary(n.op, a.f));
    }
    Value a = eval(n.args[0]), b = eval(n.args[1]);
    if (is_comparison(n.op)) {
      switch (a.type) {
        case Type::Bool: return Value::of_bool(compare(n.op, a.b, b.b));
        case Type::I32: return Value::of_bool(compare(n.op, a.i, b.i));
        case Type::F32: return Value::of_bool(compare(n.op, a.f, b.f));
      }
    }
    return n.type == Type::I32 ? Value::of_int(int_binary(n.op, a.i, b.i))
                               : Value::of_float(float_binary(n.op, a.f, b.f));
  }

  const EvalContext& ctx_;
  bool f32_;
  std::unordered_map<const Node*, Value> memo_;
};

}  // namespace

Value evaluate(const Expr& e, const EvalContext& ctx) {
  TILEJIT_INTERNAL_CHECK(e.defined(), "evaluating an undefined expression");
  return Evaluator(ctx).eval(e);
}

// ---- CompiledEval ----

namespace {
uint8_t var_slot(const std::string& n) {
  static const std::string_view names[] = {var::b,   var::h,  var::q,     var::kv,
                                           var::row, var::id, var::score, var::logit};
  for (uint8_t i = 0; i < 8; ++i)
    if (names[i] == n) return i;
  internal_error("unknown variable '{}'", n);
}
}  // namespace

CompiledEval::CompiledEval(const Expr& e, const EvalContext& bindings)
    : type_(e.type()), round_f32_(bindings.precision == FloatPrecision::F32) {
  std::unordered_map<const Node*, int32_t> reg;
  ir::visit_post_order(e, [&](const Expr& n) {
    Instr in{n.op(), n.type(), n.num_args() ? n.arg(0).type() : n.type(), 0, 0, 0, 0, {0.0}};
    auto operand = [&](size_t i) { return reg.at(n.arg(i).get()); };
    switch (n.op()) {
      case Op::ConstBool:
      case Op::ConstInt: in.imm.i = static_cast<int32_t>(n->ival); break;
      case Op::ConstFloat: in.imm.f = n->fval; break;
      case Op::Param: {
        Value v = param_value(n, bindings);
        if (n.type() == Type::I32)
          in.imm.i = v.i;
        else
          in.imm.f = v.f;
        break;
      }
      case Op::Var: in.var = var_slot(n->name); break;
      case Op::Load:
        in.a = static_cast<int32_t>(load_indices_.size());
        in.b = static_cast<int32_t>(n.num_args());
        in.c = static_cast<int32_t>(buffers_.size());
        buffers_.push_back(find_buffer(n, bindings));
        for (size_t i = 0; i < n.num_args(); ++i) load_indices_.push_back(operand(i));
        break;
      default:
        if (n.num_args() > 0) in.a = operand(0);
        if (n.num_args() > 1) in.b = operand(1);
        if (n.num_args() > 2) in.c = operand(2);
    }
    reg.emplace(n.get(), static_cast<int32_t>(code_.size()));
    code_.push_back(in);
  });
}

CompiledEval::Slot CompiledEval::run(const int32_t* index_vars, double score, double logit) const {
  constexpr size_t kStackRegs = 256;
  Slot stack_regs[kStackRegs];
  std::vector<Slot> heap_regs;
  Slot* r = stack_regs;
  if (code_.size() > kStackRegs) {
    heap_regs.resize(code_.size());
    r = heap_regs.data();
  }
  auto fl = [this](double v) { return round_f32_ ? round_f32(v) : v; };
  for (size_t k = 0; k < code_.size(); ++k) {
    const Instr& in = code_[k];
    Slot& out = r[k];
    switch (in.op) {
      case Op::ConstBool:
      case Op::ConstInt:
      case Op::ConstFloat:
      case Op::Param: out = in.imm; break;
      case Op::Var:
        if (in.var < 6)
          out.i = index_vars[in.var];
        else
          out.f = fl(in.var == 6 ? score : logit);
        break;
      case Op::Load: {
        const int32_t* ix = &load_indices_[in.a];
        Value v = read_element(buffers_[in.c], in.b, [&](size_t d) { return r[ix[d]].i; });
        if (in.type == Type::I32)
          out.i = v.i;
        else
          out.f = v.f;
        break;
      }
      case Op::Cast: {
        const Slot& a = r[in.a];
        Value av = in.arg_type == Type::F32   ? Value::of_float(a.f)
                   : in.arg_type == Type::I32 ? Value::of_int(a.i)
                                              : Value::of_bool(a.i != 0);
        Value v = cast_value(in.type, av);
        if (in.type == Type::F32)
          out.f = fl(v.f);
        else
          out.i = in.type == Type::Bool ? v.b : v.i;
        break;
      }
      case Op::Not: out.i = !r[in.a].i; break;
      case Op::And: out.i = r[in.a].i && r[in.b].i; break;
      case Op::Or: out.i = r[in.a].i || r[in.b].i; break;
      case Op::Select: out = r[in.a].i ? r[in.b] : r[in.c]; break;
      case Op::Neg:
      case Op::Abs:
      case Op::Exp:
      case Op::Exp2:
      case Op::Log:
      case Op::Log2:
      case Op::Tanh:
      case Op::Sqrt:
      case Op::Rsqrt:
        if (in.type == Type::I32)
          out.i = int_unary(in.op, r[in.a].i);
        else
          out.f = fl(float_unary(in.op, r[in.a].f));
        break;
      case Op::Eq:
      case Op::Ne:
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
        out.i = in.arg_type == Type::F32 ? compare(in.op, r[in.a].f, r[in.b].f)
                                         : compare(in.op, r[in.a].i, r[in.b].i);
        break;
      default:  // Add .. Max
        if (in.type == Type::I32)
          out.i = int_binary(in.op, r[in.a].i, r[in.b].i);
        else
          out.f = fl(float_binary(in.op, r[in.a].f, r[in.b].f));
    }
  }
  return r[code_.size() - 1];
}

Value CompiledEval::eval(const EvalContext& v) const {
  int32_t ix[6];
  int64_t src[6] = {v.b, v.h, v.q, v.kv, v.row, v.id};
  for (int i = 0; i < 6; ++i) ix[i] = wrap(static_cast<uint32_t>(src[i]));
  Slot s = run(ix, v.score, v.logit);
  switch (type_) {
    case Type::Bool: return Value::of_bool(s.i != 0);
    case Type::I32: return Value::of_int(s.i);
    case Type::F32: return Value::of_float(s.f);
  }
  return {};
}

bool CompiledEval::eval_mask(int64_t b, int64_t h, int64_t q, int64_t kv) const {
  TILEJIT_INTERNAL_CHECK(type_ == Type::Bool, "eval_mask on a {} expression", type_name(type_));
  int32_t ix[6] = {wrap(static_cast<uint32_t>(b)),
                   wrap(static_cast<uint32_t>(h)),
                   wrap(static_cast<uint32_t>(q)),
                   wrap(static_cast<uint32_t>(kv)),
                   0,
                   0};
  return run(ix, 0, 0).i != 0;
}

double CompiledEval::eval_score(double score, int64_t b, int64_t h, int64_t q, int64_t kv) const {
  TILEJIT_INTERNAL_CHECK(type_ == Type::F32, "eval_score on a {} expression", type_name(type_));
  int32_t ix[6] = {wrap(static_cast<uint32_t>(b)),
                   wrap(static_cast<uint32_t>(h)),
                   wrap(static_cast<uint32_t>(q)),
                   wrap(static_cast<uint32_t>(kv)),
                   0,
                   0};
  return run(ix, score, 0).f;
}

double CompiledEval::eval_logit(double logit, int64_t row, int64_t id) const {
  TILEJIT_INTERNAL_CHECK(type_ == Type::F32, "eval_logit on a {} expression", type_name(type_));
  int32_t ix[6] = {0, 0, 0, 0, wrap(static_cast<uint32_t>(row)), wrap(static_cast<uint32_t>(id))};
  return run(ix, 0, logit).f;
}

}  // namespace tilejit
