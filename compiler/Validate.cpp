#include "compiler/Validate.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>

#include "compiler/Error.h"
#include "compiler/Printer.h"

namespace tilejit {

bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Names an expression already gives a meaning to: variables, literals, functions and types.
bool is_reserved_name(std::string_view s) {
  static const std::set<std::string_view> reserved = [] {
    std::set<std::string_view> r = {var::b,     var::h,     var::q, var::kv, var::row, var::id,
                                    var::score, var::logit, "true", "false", "bool",   "i32",
                                    "f32",      "bf16",     "f16",  "inf",   "nan"};
    for (int i = 0; i <= static_cast<int>(Op::Select); ++i)
      if (is_identifier(op_spelling(static_cast<Op>(i)))) r.insert(op_spelling(static_cast<Op>(i)));
    return r;
  }();
  return reserved.count(s) > 0;
}

namespace {

// Checks one program's declarations and expressions; every message names the program.
class Validator {
 public:
  Validator(std::string_view kind, const std::string& name, const std::vector<BufferDecl>& buffers,
            const std::vector<ParamDecl>& params)
      : name_(name), buffers_(buffers), params_(params) {
    TILEJIT_USER_CHECK(is_identifier(name), "{} program name '{}' is not an identifier", kind,
                       name);
    std::set<std::string_view> seen;
    auto declare = [&](std::string_view what, const std::string& n) {
      if (!is_identifier(n)) fail("{} name '{}' is not an identifier", what, n);
      if (is_reserved_name(n)) fail("{} name '{}' is reserved (a variable or built-in name)", what, n);
      if (!seen.insert(n).second) fail("'{}' is declared twice", n);
    };
    for (const BufferDecl& b : buffers) {
      declare("buffer", b.name);
      if (b.dims.empty()) fail("buffer '{}' has no dimensions", b.name);
      for (const std::string& d : b.dims)
        if (!is_identifier(d)) fail("buffer '{}' has a dimension named '{}'", b.name, d);
    }
    for (const ParamDecl& p : params) {
      declare("param", p.name);
      if (p.type == Type::Bool) fail("param '{}' must be f32 or i32", p.name);
    }
  }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    user_error("program '{}': {}", name_, fmt::format(f, std::forward<Args>(args)...));
  }

  // Checks `e`, the program's `field`, which must have type `want` and may read `vars`.
  void check_expr(std::string_view field, const Expr& e, Type want,
                  std::initializer_list<std::string_view> vars) {
    field_ = field;
    vars_ = vars;
    if (!e.defined()) fail("{} is not set", field);
    ir::visit_post_order(e, [&](const Expr& n) { check_node(n); });
    if (e.type() != want)
      fail("{} must be {}, got {} in `{}`", field, type_name(want), type_name(e.type()),
           print_expr(e));
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail_at(const Expr& e, fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {} in `{}`", field_, fmt::format(f, std::forward<Args>(args)...), print_expr(e));
  }

  void check_node(const Expr& e) {
    const Node& n = *e;
    int arity = op_arity(n.op);
    if (arity >= 0 && static_cast<int>(n.args.size()) != arity)
      fail_at(e, "'{}' has {} operands, not {}", op_spelling(n.op), n.args.size(), arity);
    auto arg_type = [&](size_t i) { return n.args[i].type(); };
    auto expect = [&](bool ok, std::string_view what) {
      if (!ok) {
        std::string types;
        for (const Expr& a : n.args)
          types += (types.empty() ? "" : ", ") + std::string(type_name(a.type()));
        fail_at(e, "'{}' needs {}, got ({}) giving {}", op_spelling(n.op), what, types,
                type_name(n.type));
      }
    };
    switch (n.op) {
      case Op::ConstBool:
        expect(n.type == Type::Bool && (n.ival == 0 || n.ival == 1), "a bool");
        return;
      case Op::ConstInt:
        expect(n.type == Type::I32 && n.ival >= std::numeric_limits<int32_t>::min() &&
                   n.ival <= std::numeric_limits<int32_t>::max(),
               "an i32 value");
        return;
      case Op::ConstFloat:
        expect(n.type == Type::F32 && (std::isnan(n.fval) ||
                                       static_cast<double>(static_cast<float>(n.fval)) == n.fval),
               "an f32 value");
        return;
      case Op::Var: return check_var(e);
      case Op::Param: return check_param(e);
      case Op::Load: return check_load(e);
      case Op::Cast: return;  // any type to any type
      case Op::Not:
        expect(arg_type(0) == Type::Bool && n.type == Type::Bool, "a bool operand");
        return;
      case Op::Neg:
      case Op::Abs:
        expect(arg_type(0) != Type::Bool && n.type == arg_type(0), "a numeric operand");
        return;
      case Op::And:
      case Op::Or:
        expect(arg_type(0) == Type::Bool && arg_type(1) == Type::Bool && n.type == Type::Bool,
               "bool operands");
        return;
      case Op::Select:
        expect(arg_type(0) == Type::Bool && arg_type(1) == arg_type(2) && n.type == arg_type(1),
               "a bool condition and two operands of one type");
        return;
      default: break;
    }
    if (is_transcendental(n.op)) {
      expect(arg_type(0) == Type::F32 && n.type == Type::F32, "an f32 operand");
    } else if (is_comparison(n.op)) {
      bool bool_ok = n.op == Op::Eq || n.op == Op::Ne || arg_type(0) != Type::Bool;
      expect(arg_type(0) == arg_type(1) && bool_ok && n.type == Type::Bool,
             "two operands of one type (bools only for == and !=)");
    } else {  // Add .. Max
      expect(arg_type(0) == arg_type(1) && arg_type(0) != Type::Bool && n.type == arg_type(0),
             "two numeric operands of one type");
    }
  }

  void check_var(const Expr& e) {
    const std::string& v = e->name;
    if (std::find(vars_.begin(), vars_.end(), v) == vars_.end())
      fail_at(e, "variable '{}' is not available here (available: {})", v, fmt::join(vars_, ", "));
    Type want = (v == var::score || v == var::logit) ? Type::F32 : Type::I32;
    if (e.type() != want) fail_at(e, "variable '{}' must be {}", v, type_name(want));
  }

  void check_param(const Expr& e) {
    auto it = std::find_if(params_.begin(), params_.end(),
                           [&](const ParamDecl& p) { return p.name == e->name; });
    if (it == params_.end()) fail_at(e, "param '{}' is not declared", e->name);
    if (it->type != e.type())
      fail_at(e, "param '{}' is declared {} but used as {}", e->name, type_name(it->type),
              type_name(e.type()));
  }

  void check_load(const Expr& e) {
    auto it = std::find_if(buffers_.begin(), buffers_.end(),
                           [&](const BufferDecl& b) { return b.name == e->name; });
    if (it == buffers_.end()) fail_at(e, "buffer '{}' is not declared", e->name);
    if (e.num_args() != it->dims.size())
      fail_at(e, "buffer '{}' has {} dimensions but is indexed with {}", e->name, it->dims.size(),
              e.num_args());
    for (size_t i = 0; i < e.num_args(); ++i)
      if (e.arg(i).type() != Type::I32)
        fail_at(e, "index {} of '{}' is {}, not i32", i, e->name, type_name(e.arg(i).type()));
    if (e.type() != value_type(it->elem))
      fail_at(e, "buffer '{}' holds {} but is read as {}", e->name, elem_type_name(it->elem),
              type_name(e.type()));
  }

  const std::string& name_;
  const std::vector<BufferDecl>& buffers_;
  const std::vector<ParamDecl>& params_;
  std::string_view field_;
  std::vector<std::string_view> vars_;
};

void check_segments(const Validator& v, std::string_view what, const std::vector<Segment>& segs,
                    std::set<std::string>& names) {
  const Segment* prev = nullptr;
  for (const Segment& s : segs) {
    if (!is_identifier(s.name)) v.fail("{} name '{}' is not an identifier", what, s.name);
    if (!names.insert(s.name).second) v.fail("{} name '{}' is used twice", what, s.name);
    if (s.begin < 0) v.fail("{} '{}' begins at {} < 0", what, s.name, s.begin);
    if (s.end <= s.begin) v.fail("{} '{}' is empty: [{}, {})", what, s.name, s.begin, s.end);
    if (s.end > std::numeric_limits<int32_t>::max())
      v.fail("{} '{}' ends at {}, past the i32 id range", what, s.name, s.end);
    if (!is_identifier(s.weight))
      v.fail("{} '{}' has no valid weight name ('{}')", what, s.name, s.weight);
    if (!s.bias.empty() && !is_identifier(s.bias))
      v.fail("{} '{}' has an invalid bias name '{}'", what, s.name, s.bias);
    if (prev && s.begin < prev->begin)
      v.fail("{}s are not sorted: '{}' [{}, {}) comes after '{}' [{}, {})", what, s.name, s.begin,
             s.end, prev->name, prev->begin, prev->end);
    if (prev && s.begin < prev->end)
      v.fail("{}s '{}' [{}, {}) and '{}' [{}, {}) overlap", what, prev->name, prev->begin,
             prev->end, s.name, s.begin, s.end);
    prev = &s;
  }
}

}  // namespace

void validate(const AttentionProgram& p) {
  Validator v("attention", p.name, p.buffers, p.params);
  v.check_expr("mask", p.mask, Type::Bool, {var::b, var::h, var::q, var::kv});
  v.check_expr("score", p.score, Type::F32, {var::score, var::b, var::h, var::q, var::kv});
}

namespace {
// The live ids of a layout as merged [begin, end) ranges.
std::vector<std::pair<int64_t, int64_t>> live_ranges(std::vector<Segment> segs) {
  std::sort(segs.begin(), segs.end(),
            [](const Segment& a, const Segment& b) { return a.begin < b.begin; });
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Segment& s : segs) {
    if (!out.empty() && out.back().second == s.begin)
      out.back().second = s.end;
    else
      out.emplace_back(s.begin, s.end);
  }
  return out;
}
}  // namespace

void validate(const LossProgram& p) {
  Validator v("loss", p.name, p.buffers, p.params);
  v.check_expr("logit", p.logit, Type::F32, {var::logit, var::row, var::id});
  if (p.segments.empty()) v.fail("the layout has no segments");
  std::set<std::string> names;
  check_segments(v, "segment", p.segments, names);
  if (!(p.label_smoothing >= 0 && p.label_smoothing < 1))
    v.fail("label_smoothing must be in [0, 1), got {}", format_f64(p.label_smoothing));
  if (!(p.z_loss >= 0 && std::isfinite(p.z_loss)))
    v.fail("z_loss must be finite and >= 0, got {}", format_f64(p.z_loss));
  if (p.kl) {
    if (!(p.kl->alpha >= 0 && p.kl->alpha <= 1))
      v.fail("kl alpha must be in [0, 1], got {}", format_f64(p.kl->alpha));
    if (!(p.kl->temperature > 0 && std::isfinite(p.kl->temperature)))
      v.fail("kl temperature must be finite and > 0, got {}", format_f64(p.kl->temperature));
    std::set<std::string> teacher_names;  // the teacher's layout is a separate namespace
    check_segments(v, "teacher segment", p.kl->teacher_segments, teacher_names);
    // KL(teacher || student) is finite only when both distributions live on the same ids.
    if (!p.kl->teacher_segments.empty() &&
        live_ranges(p.kl->teacher_segments) != live_ranges(p.segments))
      v.fail("the teacher segments must cover exactly the student's live ids");
  }
}

}  // namespace tilejit
