#include "tests/support/RandomProgram.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>

#include "dsl/Expr.h"

namespace tilejit::testing {

namespace {

// Portable draws: std::uniform_*_distribution differ between standard libraries, and a seed
// must give the same program everywhere.
uint64_t draw(std::mt19937_64& rng, uint64_t n) { return rng() % n; }
bool chance(std::mt19937_64& rng, int percent) {
  return draw(rng, 100) < static_cast<uint64_t>(percent);
}
int64_t draw_range(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // inclusive
  return lo + static_cast<int64_t>(draw(rng, static_cast<uint64_t>(hi - lo + 1)));
}
double draw_unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

template <typename T>
const T& pick(std::mt19937_64& rng, const std::vector<T>& v) {
  return v[draw(rng, v.size())];
}

class Generator {
 public:
  Generator(std::mt19937_64& rng, const std::vector<Expr>& int_vars,
            const std::vector<Expr>& float_vars, const std::vector<BufferDecl>& buffers,
            const std::vector<ParamDecl>& params, const RandomProgramOptions& opt)
      : rng_(rng),
        int_vars_(int_vars),
        float_vars_(float_vars),
        buffers_(buffers),
        params_(params),
        opt_(opt) {}

  Expr expr(Type t, int depth) {
    // Leaves become likelier as the remaining depth shrinks.
    if (depth <= 0 || chance(rng_, 100 / (depth + 2))) return leaf(t, depth);
    switch (t) {
      case Type::Bool: return bool_node(depth);
      case Type::I32: return int_node(depth);
      case Type::F32: return float_node(depth);
    }
    return leaf(t, depth);
  }

 private:
  Type numeric_type() { return chance(rng_, 50) ? Type::I32 : Type::F32; }

  Expr const_int() {
    switch (draw(rng_, 10)) {
      case 0: return lit(std::numeric_limits<int32_t>::max() - static_cast<int>(draw(rng_, 3)));
      case 1: return lit(std::numeric_limits<int32_t>::min() + static_cast<int>(draw(rng_, 3)));
      case 2: return lit(0);
      case 3: return lit(1);
      default: return lit(static_cast<int>(draw_range(rng_, -9, 64)));
    }
  }

  Expr const_float() {
    if (opt_.use_special_floats && chance(rng_, 8)) {
      switch (draw(rng_, 4)) {
        case 0: return lit(-0.0);
        case 1: return lit(std::numeric_limits<double>::infinity());
        case 2: return lit(-std::numeric_limits<double>::infinity());
        default: return lit(std::numeric_limits<double>::quiet_NaN());
      }
    }
    switch (draw(rng_, 8)) {
      case 0: return lit(0.0);
      case 1: return lit(1.0);
      case 2: return lit(0.5);
      case 3: return lit(-1.0);
      default: return lit((draw_unit(rng_) - 0.5) * 16.0);  // rounded to f32 by the IR
    }
  }

  std::vector<const ParamDecl*> params_of(Type t) const {
    std::vector<const ParamDecl*> out;
    if (!opt_.use_params) return out;
    for (const ParamDecl& p : params_)
      if (p.type == t) out.push_back(&p);
    return out;
  }

  std::vector<const BufferDecl*> buffers_of(Type t) const {
    std::vector<const BufferDecl*> out;
    if (!opt_.use_buffers) return out;
    for (const BufferDecl& b : buffers_)
      if (value_type(b.elem) == t) out.push_back(&b);
    return out;
  }

  // An index: mostly an index variable, shifted or clamped, so reads land in and out of range.
  Expr index() {
    if (int_vars_.empty()) return lit(static_cast<int>(draw_range(rng_, -1, 8)));
    Expr v = pick(rng_, int_vars_);
    switch (draw(rng_, 8)) {
      case 0: return v + static_cast<int>(draw_range(rng_, -2, 3));
      case 1: return v / static_cast<int>(draw_range(rng_, 1, 4));
      case 2: return min(v, static_cast<int>(draw_range(rng_, 0, 16)));
      case 3: return v - pick(rng_, int_vars_);
      case 4: return lit(static_cast<int>(draw_range(rng_, -1, 8)));
      default: return v;
    }
  }

  Expr load(const BufferDecl& b) {
    std::vector<Expr> ix;
    for (size_t i = 0; i < b.dims.size(); ++i) ix.push_back(index());
    return ir::make_load(b.name, value_type(b.elem), std::move(ix));
  }

  Expr leaf(Type t, int depth) {
    if (t == Type::Bool) {
      if (chance(rng_, 30) || depth < 0) return lit(chance(rng_, 50));
      // A comparison of two leaves keeps bool leaves interesting.
      Type nt = numeric_type();
      static const Op cmp[] = {Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge};
      return apply(cmp[draw(rng_, 6)], {leaf(nt, -1), leaf(nt, -1)});
    }
    const std::vector<Expr>& vars = t == Type::I32 ? int_vars_ : float_vars_;
    auto params = params_of(t);
    auto buffers = buffers_of(t);
    for (;;) {
      switch (draw(rng_, 6)) {
        case 0:
        case 1:
          if (!vars.empty()) return pick(rng_, vars);
          break;
        case 2:
          if (!params.empty()) return ir::make_param(pick(rng_, params)->name, t);
          break;
        case 3:
          if (!buffers.empty()) return load(*pick(rng_, buffers));
          break;
        default: return t == Type::I32 ? const_int() : const_float();
      }
    }
  }

  Expr bool_node(int depth) {
    switch (draw(rng_, 8)) {
      case 0:
      case 1: {
        static const Op cmp[] = {Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge};
        Op op = cmp[draw(rng_, 6)];
        // Mixed i32/f32 operands exercise the DSL's promotion.
        return apply(op, {expr(numeric_type(), depth - 1), expr(numeric_type(), depth - 1)});
      }
      case 2:
        return apply(chance(rng_, 50) ? Op::Eq : Op::Ne,
                     {expr(Type::Bool, depth - 1), expr(Type::Bool, depth - 1)});
      case 3: return apply(Op::And, {expr(Type::Bool, depth - 1), expr(Type::Bool, depth - 1)});
      case 4: return apply(Op::Or, {expr(Type::Bool, depth - 1), expr(Type::Bool, depth - 1)});
      case 5: return apply(Op::Not, {expr(Type::Bool, depth - 1)});
      case 6:
        return apply(Op::Select, {expr(Type::Bool, depth - 1), expr(Type::Bool, depth - 1),
                                  expr(Type::Bool, depth - 1)});
      default: return ir::make_cast(Type::Bool, expr(numeric_type(), depth - 1));
    }
  }

  Expr arithmetic(Type t, int depth) {
    static const Op ops[] = {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Mod, Op::Min, Op::Max};
    Op op = ops[draw(rng_, 7)];
    if (t == Type::F32 && chance(rng_, 20)) {
      // One i32 operand: the DSL promotes it with a cast.
      bool left = chance(rng_, 50);
      return apply(op, {expr(left ? Type::I32 : Type::F32, depth - 1),
                        expr(left ? Type::F32 : Type::I32, depth - 1)});
    }
    return apply(op, {expr(t, depth - 1), expr(t, depth - 1)});
  }

  Expr int_node(int depth) {
    switch (draw(rng_, 10)) {
      case 0: return apply(Op::Neg, {expr(Type::I32, depth - 1)});
      case 1: return apply(Op::Abs, {expr(Type::I32, depth - 1)});
      case 2:
        return apply(Op::Select, {expr(Type::Bool, depth - 1), expr(Type::I32, depth - 1),
                                  expr(Type::I32, depth - 1)});
      case 3:
        return ir::make_cast(Type::I32, expr(chance(rng_, 75) ? Type::F32 : Type::Bool, depth - 1));
      default: return arithmetic(Type::I32, depth);
    }
  }

  Expr float_node(int depth) {
    switch (draw(rng_, 12)) {
      case 0: return apply(Op::Neg, {expr(Type::F32, depth - 1)});
      case 1: return apply(Op::Abs, {expr(Type::F32, depth - 1)});
      case 2:
        return apply(Op::Select, {expr(Type::Bool, depth - 1), expr(Type::F32, depth - 1),
                                  expr(Type::F32, depth - 1)});
      case 3:
        return ir::make_cast(Type::F32, expr(chance(rng_, 75) ? Type::I32 : Type::Bool, depth - 1));
      case 4:
      case 5:
      case 6:
        if (opt_.use_transcendentals) {
          static const Op ops[] = {Op::Exp,  Op::Exp2, Op::Log,  Op::Log2,
                                   Op::Tanh, Op::Sqrt, Op::Rsqrt};
          // An i32 operand is promoted by the DSL.
          Type in = chance(rng_, 15) ? Type::I32 : Type::F32;
          return apply(ops[draw(rng_, 7)], {expr(in, depth - 1)});
        }
        [[fallthrough]];
      default: return arithmetic(Type::F32, depth);
    }
  }

  std::mt19937_64& rng_;
  const std::vector<Expr>& int_vars_;
  const std::vector<Expr>& float_vars_;
  const std::vector<BufferDecl>& buffers_;
  const std::vector<ParamDecl>& params_;
  const RandomProgramOptions& opt_;
};

// Buffers of random element types, each with 1-2 of the given dimension names.
std::vector<BufferDecl> random_buffers(std::mt19937_64& rng, const std::vector<std::string>& dims,
                                       const RandomProgramOptions& opt) {
  std::vector<BufferDecl> out;
  if (!opt.use_buffers) return out;
  static const ElemType elems[] = {ElemType::I32, ElemType::F32, ElemType::BF16, ElemType::F16};
  int n = static_cast<int>(draw_range(rng, 1, 4));
  for (int i = 0; i < n; ++i) {
    BufferDecl b;
    b.name = fmt::format("buf{}", i);
    b.elem = elems[draw(rng, 4)];
    int rank = static_cast<int>(draw_range(rng, 1, 2));
    for (int d = 0; d < rank; ++d) b.dims.push_back(pick(rng, dims));
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<ParamDecl> random_params(std::mt19937_64& rng, const RandomProgramOptions& opt) {
  std::vector<ParamDecl> out;
  if (!opt.use_params) return out;
  int n = static_cast<int>(draw_range(rng, 1, 3));
  for (int i = 0; i < n; ++i)
    out.push_back({fmt::format("p{}", i), chance(rng, 60) ? Type::F32 : Type::I32});
  return out;
}

std::vector<Segment> random_segments(std::mt19937_64& rng, std::string_view prefix) {
  std::vector<Segment> out;
  int n = static_cast<int>(draw_range(rng, 1, 3));
  int64_t at = chance(rng, 50) ? 0 : draw_range(rng, 1, 64);
  for (int i = 0; i < n; ++i) {
    Segment s;
    s.name = fmt::format("{}seg{}", prefix, i);
    s.begin = at;
    s.end = at + draw_range(rng, 1, 1000);
    s.weight = fmt::format("{}w{}", prefix, i);
    if (chance(rng, 30)) s.bias = fmt::format("{}bias{}", prefix, i);
    at = s.end + (chance(rng, 30) ? 0 : draw_range(rng, 1, 200));  // dead ids between
    out.push_back(std::move(s));
  }
  return out;
}

// A score or logit modifier that ignores its value is legal but tests little: most of the time,
// combine it with the value.
Expr uses_value(std::mt19937_64& rng, const Expr& value, Expr e) {
  if (ir::uses_var(e, value->name) || chance(rng, 20)) return e;
  static const Op ops[] = {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Min, Op::Max};
  return apply(ops[draw(rng, 6)], {value, e});
}

}  // namespace

Expr random_expr(std::mt19937_64& rng, Type t, const std::vector<Expr>& int_vars,
                 const std::vector<Expr>& float_vars, const std::vector<BufferDecl>& buffers,
                 const std::vector<ParamDecl>& params, int depth, const RandomProgramOptions& opt) {
  return Generator(rng, int_vars, float_vars, buffers, params, opt).expr(t, depth);
}

AttentionProgram random_attention_program(std::mt19937_64& rng, const RandomProgramOptions& opt) {
  AttentionProgram p;
  p.name = fmt::format("random_attention_{}", draw(rng, 1000000));
  p.buffers = random_buffers(rng, {"B", "H", "S"}, opt);
  p.params = random_params(rng, opt);
  std::vector<Expr> ints = {dsl::b, dsl::h, dsl::q, dsl::kv};
  p.mask = random_expr(rng, Type::Bool, ints, {}, p.buffers, p.params, opt.max_depth, opt);
  p.score = uses_value(
      rng, dsl::score,
      random_expr(rng, Type::F32, ints, {dsl::score}, p.buffers, p.params, opt.max_depth, opt));
  return p;
}

LossProgram random_loss_program(std::mt19937_64& rng, const RandomProgramOptions& opt) {
  LossProgram p;
  p.name = fmt::format("random_loss_{}", draw(rng, 1000000));
  p.buffers = random_buffers(rng, {"N", "V"}, opt);
  p.params = random_params(rng, opt);
  p.segments = random_segments(rng, "");
  p.logit = uses_value(rng, dsl::logit,
                       random_expr(rng, Type::F32, {dsl::row, dsl::id}, {dsl::logit}, p.buffers,
                                   p.params, opt.max_depth, opt));
  if (chance(rng, 40)) p.label_smoothing = pick(rng, std::vector<double>{0.05, 0.1, 0.2, 0.5});
  if (chance(rng, 40)) p.z_loss = pick(rng, std::vector<double>{1e-4, 5e-4, 1e-3});
  if (chance(rng, 30)) {
    KlTerm kl;
    kl.alpha = 0.25 * static_cast<double>(draw_range(rng, 0, 4));
    kl.temperature = 0.5 * static_cast<double>(draw_range(rng, 1, 6));
    // A teacher layout covers exactly the student's live ids (its own weights).
    if (chance(rng, 50)) {
      kl.teacher_segments = p.segments;
      for (Segment& s : kl.teacher_segments) {
        s.name = "teacher_" + s.name;
        s.weight = "teacher_" + s.weight;
        if (!s.bias.empty()) s.bias = "teacher_" + s.bias;
      }
    }
    p.kl = std::move(kl);
  }
  if (chance(rng, 30)) p.ignore_index = -static_cast<int64_t>(draw_range(rng, 1, 200));
  static const Reduction reductions[] = {Reduction::None, Reduction::Sum, Reduction::Mean};
  p.reduction = reductions[draw(rng, 3)];
  return p;
}

}  // namespace tilejit::testing
