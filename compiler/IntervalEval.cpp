#include "compiler/IntervalEval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "compiler/Error.h"

namespace tilejit {

namespace {

constexpr int64_t kMin = std::numeric_limits<int32_t>::min();
constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kFltMax = std::numeric_limits<float>::max();
// Affine coefficients stay small enough that a range over a box fits in __int128 easily and the
// forms stay meaningful; larger ones just drop the form.
constexpr int64_t kCoefLimit = int64_t{1} << 32;

// One register: the abstract value of a node over the box. Which members matter depends on the
// node's type: `t` for bool; lo/hi (and the affine form when `affine`) for i32; flo/fhi/nan
// for f32.
struct AVal {
  Tri t = Tri::Maybe;
  bool affine = false;
  bool nan = false;
  int64_t lo = kMin, hi = kMax;
  double flo = -kInf, fhi = kInf;
  int64_t co[4] = {0, 0, 0, 0};
  int64_t c = 0;
};

bool fits(int64_t lo, int64_t hi) { return lo >= kMin && hi <= kMax; }

AVal int_range(int64_t lo, int64_t hi) {
  AVal v;
  if (fits(lo, hi)) v.lo = lo, v.hi = hi;
  return v;
}

AVal int_const(int64_t x) {
  AVal v = int_range(x, x);
  v.affine = true;
  v.c = x;
  return v;
}

AVal tri(Tri t) {
  AVal v;
  v.t = t;
  return v;
}
Tri tri_of(bool b) { return b ? Tri::True : Tri::False; }

// ---- affine forms ----

// Exact range of an affine form over a box, in 128-bit arithmetic.
void affine_range(const AVal& a, const IndexBox& box, __int128& lo, __int128& hi) {
  lo = hi = a.c;
  for (int i = 0; i < 4; ++i) {
    __int128 x = static_cast<__int128>(a.co[i]) * box.lo[i];
    __int128 y = static_cast<__int128>(a.co[i]) * box.hi[i];
    lo += std::min(x, y);
    hi += std::max(x, y);
  }
}

bool small(int64_t x) { return x > -kCoefLimit && x < kCoefLimit; }

// Keeps the affine form of `f` (computed from exact operands) when its range over the box fits
// in i32, so that the wrapping i32 computation equals it everywhere; otherwise falls back to
// `fallback`, the plain interval result.
AVal with_affine(AVal f, const IndexBox& box, const AVal& fallback) {
  for (int64_t x : f.co)
    if (!small(x)) return fallback;
  if (!small(f.c)) return fallback;
  __int128 lo, hi;
  affine_range(f, box, lo, hi);
  if (lo < kMin || hi > kMax) return fallback;
  f.affine = true;
  f.lo = static_cast<int64_t>(lo);
  f.hi = static_cast<int64_t>(hi);
  return f;
}

bool is_const(const AVal& a) {
  return a.affine && a.co[0] == 0 && a.co[1] == 0 && a.co[2] == 0 && a.co[3] == 0;
}

// ---- i32 intervals ----

AVal hull_of(const int64_t* v, int n) {
  return int_range(*std::min_element(v, v + n), *std::max_element(v, v + n));
}

AVal int_div(const AVal& a, const AVal& b) {
  // Truncating division is monotone in the dividend for a divisor of fixed sign, and the real
  // quotient over a box avoiding b = 0 takes its extremes at corners; so do the truncated ones.
  std::vector<int64_t> v;
  if (b.lo <= 0 && b.hi >= 0) v.push_back(0);  // division by zero gives 0
  auto corners = [&](int64_t blo, int64_t bhi) {
    if (blo > bhi) return;
    for (int64_t x : {a.lo, a.hi})
      for (int64_t y : {blo, bhi}) v.push_back(x / y);
  };
  corners(b.lo, std::min<int64_t>(b.hi, -1));
  corners(std::max<int64_t>(b.lo, 1), b.hi);
  // INT_MIN / -1 is 2^31 here and wraps to INT_MIN: out of i32, so int_range gives the whole range.
  return hull_of(v.data(), static_cast<int>(v.size()));
}

AVal int_mod(const AVal& a, const AVal& b) {
  if (b.lo == b.hi && b.lo > 1) {
    // A constant positive divisor and a dividend inside one bucket: the remainder is a shift.
    int64_t C = b.lo;
    if (a.lo >= 0 && a.lo / C == a.hi / C) return int_range(a.lo % C, a.hi % C);
    if (a.hi <= 0 && a.lo / C == a.hi / C) return int_range(a.lo % C, a.hi % C);
  }
  // |r| < |b|, |r| <= |a|, r has the sign of a (or is 0: b in {0, -1} gives 0).
  int64_t m = std::max(std::abs(b.lo), std::abs(b.hi)) - 1;
  if (m < 0) m = 0;
  int64_t lo = a.lo >= 0 ? 0 : std::max(a.lo, -m);
  int64_t hi = a.hi <= 0 ? 0 : std::min(a.hi, m);
  return int_range(std::min<int64_t>(lo, 0), std::max<int64_t>(hi, 0));
}

AVal int_binary(Op op, const AVal& a, const AVal& b, const IndexBox& box) {
  switch (op) {
    case Op::Add:
    case Op::Sub: {
      int64_t s = op == Op::Add ? 1 : -1;
      AVal plain = int_range(a.lo + (s > 0 ? b.lo : -b.hi), a.hi + (s > 0 ? b.hi : -b.lo));
      if (!a.affine || !b.affine) return plain;
      AVal f;
      for (int i = 0; i < 4; ++i) f.co[i] = a.co[i] + s * b.co[i];
      f.c = a.c + s * b.c;
      return with_affine(f, box, plain);
    }
    case Op::Mul: {
      int64_t v[4] = {a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi};
      AVal plain = hull_of(v, 4);
      const AVal* k = is_const(a) ? &a : is_const(b) ? &b : nullptr;
      if (k == nullptr || !a.affine || !b.affine) return plain;
      const AVal& x = k == &a ? b : a;
      if (!small(k->c)) return plain;
      AVal f;
      for (int i = 0; i < 4; ++i) f.co[i] = x.co[i] * k->c;
      f.c = x.c * k->c;
      return with_affine(f, box, plain);
    }
    case Op::Div: return int_div(a, b);
    case Op::Mod: return int_mod(a, b);
    case Op::Min: return int_range(std::min(a.lo, b.lo), std::min(a.hi, b.hi));
    case Op::Max: return int_range(std::max(a.lo, b.lo), std::max(a.hi, b.hi));
    default: internal_error("{} is not an i32 binary operation", op_name(op));
  }
}

AVal int_unary(Op op, const AVal& a, const IndexBox& box) {
  if (a.lo == kMin) return AVal{};  // -INT_MIN and abs(INT_MIN) wrap to INT_MIN
  if (op == Op::Neg) {
    AVal plain = int_range(-a.hi, -a.lo);
    if (!a.affine) return plain;
    AVal f;
    for (int i = 0; i < 4; ++i) f.co[i] = -a.co[i];
    f.c = -a.c;
    return with_affine(f, box, plain);
  }
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return int_unary(Op::Neg, a, box);
  return int_range(0, std::max(-a.lo, a.hi));
}

// The range of a - b (exact for affine operands), then the comparison with 0.
Tri int_compare(Op op, const AVal& a, const AVal& b, const IndexBox& box) {
  int64_t lo = a.lo - b.hi, hi = a.hi - b.lo;
  if (a.affine && b.affine) {
    AVal d;
    for (int i = 0; i < 4; ++i) d.co[i] = a.co[i] - b.co[i];
    d.c = a.c - b.c;
    __int128 l, h;
    affine_range(d, box, l, h);
    lo = static_cast<int64_t>(std::max<__int128>(l, lo));
    hi = static_cast<int64_t>(std::min<__int128>(h, hi));
  }
  auto decide = [](bool yes, bool no) { return yes ? Tri::True : no ? Tri::False : Tri::Maybe; };
  switch (op) {
    case Op::Eq: return decide(lo == 0 && hi == 0, lo > 0 || hi < 0);
    case Op::Ne: return decide(lo > 0 || hi < 0, lo == 0 && hi == 0);
    case Op::Lt: return decide(hi < 0, lo >= 0);
    case Op::Le: return decide(hi <= 0, lo > 0);
    case Op::Gt: return decide(lo > 0, hi <= 0);
    case Op::Ge: return decide(lo >= 0, hi < 0);
    default: internal_error("{} is not a comparison", op_name(op));
  }
}

// ---- f32 intervals ----

AVal float_range(double lo, double hi, bool nan) {
  AVal v;
  v.flo = lo;
  v.fhi = hi;
  v.nan = nan;
  return v;
}
AVal float_top() { return float_range(-kInf, kInf, true); }

// Widens an operation's exact result outward: relative `rel` covers f32 rounding (and, for
// transcendentals, the hardware approximations), `abs_err` flushed subnormals; beyond the f32
// range a value may round to infinity.
AVal widen(AVal v, double rel = 0x1p-20, double abs_err = 0x1p-126) {
  if (std::isnan(v.flo) || std::isnan(v.fhi) || v.flo > v.fhi) return float_top();
  if (std::isfinite(v.flo)) v.flo = v.flo - std::fabs(v.flo) * rel - abs_err;
  if (std::isfinite(v.fhi)) v.fhi = v.fhi + std::fabs(v.fhi) * rel + abs_err;
  if (v.flo < -kFltMax) v.flo = -kInf;
  if (v.fhi > kFltMax) v.fhi = kInf;
  return v;
}

// Hull of candidate results, NaN candidates setting the flag instead.
AVal float_hull(std::initializer_list<double> vals, bool nan) {
  double lo = kInf, hi = -kInf;
  for (double x : vals) {
    if (std::isnan(x)) {
      nan = true;
      continue;
    }
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  if (lo > hi) return float_top();
  return widen(float_range(lo, hi, nan));
}

bool contains_zero(const AVal& a) { return a.flo <= 0 && a.fhi >= 0; }

AVal float_binary(Op op, const AVal& a, const AVal& b) {
  bool nan = a.nan || b.nan;
  switch (op) {
    case Op::Add:
      return float_hull({a.flo + b.flo, a.fhi + b.fhi, a.flo + b.fhi, a.fhi + b.flo}, nan);
    case Op::Sub:
      return float_hull({a.flo - b.fhi, a.fhi - b.flo, a.flo - b.flo, a.fhi - b.fhi}, nan);
    case Op::Mul: {
      bool zero = contains_zero(a) || contains_zero(b);
      AVal r = float_hull(
          {a.flo * b.flo, a.flo * b.fhi, a.fhi * b.flo, a.fhi * b.fhi, zero ? 0.0 : a.flo * b.flo},
          nan);
      return r;
    }
    case Op::Div: {
      if (contains_zero(b)) return float_top();
      return float_hull({a.flo / b.flo, a.flo / b.fhi, a.fhi / b.flo, a.fhi / b.fhi,
                         contains_zero(a) ? 0.0 : a.flo / b.flo},
                        nan);
    }
    case Op::Mod: {
      // fmod: |r| <= |a|, |r| < |b|, r has the sign of a; NaN for an infinite a or a zero b.
      bool n = nan || std::isinf(a.flo) || std::isinf(a.fhi) || contains_zero(b);
      double m = std::min(std::max(std::fabs(a.flo), std::fabs(a.fhi)),
                          std::max(std::fabs(b.flo), std::fabs(b.fhi)));
      return widen(float_range(a.flo >= 0 ? 0.0 : -m, a.fhi <= 0 ? 0.0 : m, n));
    }
    case Op::Min:
    case Op::Max: {
      // fmin/fmax: a NaN operand yields the other one.
      bool mn = op == Op::Min;
      AVal r = float_range(mn ? std::min(a.flo, b.flo) : std::max(a.flo, b.flo),
                           mn ? std::min(a.fhi, b.fhi) : std::max(a.fhi, b.fhi), a.nan && b.nan);
      if (a.nan) r.flo = std::min(r.flo, b.flo), r.fhi = std::max(r.fhi, b.fhi);
      if (b.nan) r.flo = std::min(r.flo, a.flo), r.fhi = std::max(r.fhi, a.fhi);
      return r;
    }
    default: internal_error("{} is not an f32 binary operation", op_name(op));
  }
}

// Monotone functions: increasing ones map the ends, decreasing ones swap them. Outside its
// domain an argument gives NaN.
AVal float_unary(Op op, const AVal& a) {
  constexpr double kRel = 0x1p-9, kAbs = 0x1p-20;  // approximations of transcendentals
  auto inc = [&](double (*f)(double), double domain_lo) {
    bool nan = a.nan || a.flo < domain_lo;
    if (a.fhi < domain_lo) return float_top();
    double lo = std::max(a.flo, domain_lo);
    return widen(float_range(f(lo), f(a.fhi), nan), kRel, kAbs);
  };
  switch (op) {
    case Op::Neg: return float_range(-a.fhi, -a.flo, a.nan);
    case Op::Abs:
      if (a.flo >= 0) return a;
      if (a.fhi <= 0) return float_range(-a.fhi, -a.flo, a.nan);
      return float_range(0, std::max(-a.flo, a.fhi), a.nan);
    case Op::Exp: return inc([](double x) { return std::exp(x); }, -kInf);
    case Op::Exp2: return inc([](double x) { return std::exp2(x); }, -kInf);
    case Op::Tanh: return inc([](double x) { return std::tanh(x); }, -kInf);
    // -0.0 is in the domain (log gives -inf, sqrt -0.0): the domain starts at 0 inclusive.
    case Op::Log: return inc([](double x) { return std::log(x); }, 0.0);
    case Op::Log2: return inc([](double x) { return std::log2(x); }, 0.0);
    case Op::Sqrt: return inc([](double x) { return std::sqrt(x); }, 0.0);
    case Op::Rsqrt: {
      // 1/sqrt(+-0) is +-inf: only a range strictly above 0 is monotone.
      if (a.flo <= 0) return float_top();
      return widen(float_range(1 / std::sqrt(a.fhi), 1 / std::sqrt(a.flo), a.nan), kRel, kAbs);
    }
    default: internal_error("{} is not an f32 unary operation", op_name(op));
  }
}

Tri float_compare(Op op, const AVal& a, const AVal& b) {
  bool nan = a.nan || b.nan;
  auto decide = [](bool yes, bool no) { return yes ? Tri::True : no ? Tri::False : Tri::Maybe; };
  bool point_eq = a.flo == a.fhi && b.flo == b.fhi && a.flo == b.flo;
  bool disjoint = a.fhi < b.flo || b.fhi < a.flo;
  switch (op) {
    case Op::Eq: return decide(!nan && point_eq, disjoint);
    case Op::Ne: return decide(disjoint, !nan && point_eq);  // NaN != x is true
    case Op::Lt: return decide(!nan && a.fhi < b.flo, a.flo >= b.fhi);
    case Op::Le: return decide(!nan && a.fhi <= b.flo, a.flo > b.fhi);
    case Op::Gt: return decide(!nan && a.flo > b.fhi, a.fhi <= b.flo);
    case Op::Ge: return decide(!nan && a.flo >= b.fhi, a.fhi < b.flo);
    default: internal_error("{} is not a comparison", op_name(op));
  }
}

// f32 -> i32: truncate toward zero, saturate, NaN -> 0 (monotone).
int64_t float_to_int(double f) {
  if (f >= 2147483648.0) return kMax;
  if (f <= -2147483649.0) return kMin;
  return static_cast<int64_t>(f);
}

AVal cast(Type to, Type from, const AVal& a) {
  if (from == to) return a;
  switch (to) {
    case Type::Bool:
      if (from == Type::I32)
        return tri(a.lo > 0 || a.hi < 0     ? Tri::True
                   : a.lo == 0 && a.hi == 0 ? Tri::False
                                            : Tri::Maybe);
      return tri(a.flo > 0 || a.fhi < 0               ? Tri::True  // NaN != 0 is true as well
                 : a.flo == 0 && a.fhi == 0 && !a.nan ? Tri::False
                                                      : Tri::Maybe);
    case Type::I32:
      if (from == Type::Bool)
        return a.t == Tri::Maybe ? int_range(0, 1) : int_const(a.t == Tri::True ? 1 : 0);
      {
        int64_t lo = float_to_int(a.flo), hi = float_to_int(a.fhi);
        if (a.nan) lo = std::min<int64_t>(lo, 0), hi = std::max<int64_t>(hi, 0);
        return int_range(lo, hi);
      }
    case Type::F32:
      if (from == Type::Bool)
        return a.t == Tri::Maybe
                   ? float_range(0, 1, false)
                   : float_range(a.t == Tri::True ? 1 : 0, a.t == Tri::True ? 1 : 0, false);
      return widen(float_range(static_cast<double>(a.lo), static_cast<double>(a.hi), false));
  }
  return a;
}

Tri tri_not(Tri a) {
  return a == Tri::True ? Tri::False : a == Tri::False ? Tri::True : Tri::Maybe;
}
Tri tri_and(Tri a, Tri b) {
  if (a == Tri::False || b == Tri::False) return Tri::False;
  return a == Tri::True && b == Tri::True ? Tri::True : Tri::Maybe;
}
Tri tri_or(Tri a, Tri b) {
  if (a == Tri::True || b == Tri::True) return Tri::True;
  return a == Tri::False && b == Tri::False ? Tri::False : Tri::Maybe;
}

Tri bool_compare(Op op, Tri a, Tri b) {
  if (a == Tri::Maybe || b == Tri::Maybe) return Tri::Maybe;
  int x = a == Tri::True, y = b == Tri::True;
  switch (op) {
    case Op::Eq: return tri_of(x == y);
    case Op::Ne: return tri_of(x != y);
    case Op::Lt: return tri_of(x < y);
    case Op::Le: return tri_of(x <= y);
    case Op::Gt: return tri_of(x > y);
    case Op::Ge: return tri_of(x >= y);
    default: internal_error("{} is not a comparison", op_name(op));
  }
}

AVal join(Type t, const AVal& a, const AVal& b) {
  switch (t) {
    case Type::Bool: return tri(a.t == b.t ? a.t : Tri::Maybe);
    case Type::I32: return int_range(std::min(a.lo, b.lo), std::max(a.hi, b.hi));
    case Type::F32:
      return float_range(std::min(a.flo, b.flo), std::max(a.fhi, b.fhi), a.nan || b.nan);
  }
  return a;
}

int var_index(const std::string& n) {
  if (n == var::b) return 0;
  if (n == var::h) return 1;
  if (n == var::q) return 2;
  if (n == var::kv) return 3;
  return -1;  // not an attention index variable: unknown over the box
}

}  // namespace

struct IntervalEval::Impl {
  struct Instr {
    Op op;
    Type type;
    Type arg_type;
    int var = -1;
    int a = 0, b = 0, c = 0;  // operand registers; Load: first index slot, count, load number
    AVal imm;                 // constants and params
  };
  std::vector<Instr> code;
  std::vector<int> load_indices;
  std::vector<Expr> loads;
  bool uses[4] = {false, false, false, false};
  mutable std::vector<AVal> regs;
  mutable std::vector<int64_t> ix_lo, ix_hi;
};

IntervalEval::IntervalEval(const Expr& mask,
                           const std::map<std::string, ParamValue, std::less<>>& params)
    : impl_(std::make_unique<Impl>()) {
  TILEJIT_INTERNAL_CHECK(mask.defined() && mask.type() == Type::Bool,
                         "interval evaluation needs a bool expression");
  EvalContext ctx;
  ctx.params = params;
  std::unordered_map<const Node*, int> reg;
  ir::visit_post_order(mask, [&](const Expr& n) {
    Impl::Instr in{n.op(), n.type(), n.num_args() ? n.arg(0).type() : n.type(), -1, 0, 0,
                   0,      AVal{}};
    auto operand = [&](size_t i) { return reg.at(n.arg(i).get()); };
    switch (n.op()) {
      case Op::ConstBool: in.imm = tri(n->ival ? Tri::True : Tri::False); break;
      case Op::ConstInt: in.imm = int_const(n->ival); break;
      case Op::ConstFloat:
        in.imm = std::isnan(n->fval) ? float_top() : float_range(n->fval, n->fval, false);
        break;
      case Op::Param: {
        Value v = evaluate(n, ctx);  // the param's value, converted as the interpreter does
        in.imm = n.type() == Type::I32 ? int_const(v.i) : float_range(v.f, v.f, std::isnan(v.f));
        if (std::isnan(v.f) && n.type() == Type::F32) in.imm = float_top();
        break;
      }
      case Op::Var:
        in.var = var_index(n->name);
        if (in.var >= 0) impl_->uses[in.var] = true;
        break;
      case Op::Load:
        in.a = static_cast<int>(impl_->load_indices.size());
        in.b = static_cast<int>(n.num_args());
        in.c = static_cast<int>(impl_->loads.size());
        impl_->loads.push_back(n);
        for (size_t i = 0; i < n.num_args(); ++i) impl_->load_indices.push_back(operand(i));
        break;
      default:
        if (n.num_args() > 0) in.a = operand(0);
        if (n.num_args() > 1) in.b = operand(1);
        if (n.num_args() > 2) in.c = operand(2);
    }
    reg.emplace(n.get(), static_cast<int>(impl_->code.size()));
    impl_->code.push_back(in);
  });
  impl_->regs.resize(impl_->code.size());
  impl_->ix_lo.resize(impl_->load_indices.size());
  impl_->ix_hi.resize(impl_->load_indices.size());
}

IntervalEval::~IntervalEval() = default;
IntervalEval::IntervalEval(IntervalEval&&) noexcept = default;
IntervalEval& IntervalEval::operator=(IntervalEval&&) noexcept = default;

const std::vector<Expr>& IntervalEval::loads() const { return impl_->loads; }
bool IntervalEval::uses(int v) const { return v >= 0 && v < 4 && impl_->uses[v]; }

Tri IntervalEval::eval(const IndexBox& box, const LoadOracle* oracle) const {
  const Impl& m = *impl_;
  std::vector<AVal>& r = m.regs;
  for (size_t k = 0; k < m.code.size(); ++k) {
    const Impl::Instr& in = m.code[k];
    AVal& out = r[k];
    switch (in.op) {
      case Op::ConstBool:
      case Op::ConstInt:
      case Op::ConstFloat:
      case Op::Param: out = in.imm; break;
      case Op::Var:
        if (in.type == Type::F32)
          out = float_top();
        else if (in.var < 0)
          out = AVal{};
        else {
          AVal f;
          f.co[in.var] = 1;
          out = with_affine(f, box, int_range(box.lo[in.var], box.hi[in.var]));
        }
        break;
      case Op::Load: {
        TILEJIT_INTERNAL_CHECK(oracle != nullptr, "a buffer read needs a LoadOracle");
        for (int i = 0; i < in.b; ++i) {
          const AVal& ix = r[m.load_indices[in.a + i]];
          m.ix_lo[in.a + i] = ix.lo;
          m.ix_hi[in.a + i] = ix.hi;
        }
        ValueRange v = oracle->range(in.c, m.ix_lo.data() + in.a, m.ix_hi.data() + in.a);
        if (in.type == Type::I32)
          out = int_range(static_cast<int64_t>(std::floor(v.lo)),
                          static_cast<int64_t>(std::ceil(v.hi)));
        else
          out = float_range(v.lo, v.hi, v.may_nan);
        break;
      }
      case Op::Cast: out = cast(in.type, in.arg_type, r[in.a]); break;
      case Op::Not: out = tri(tri_not(r[in.a].t)); break;
      case Op::And: out = tri(tri_and(r[in.a].t, r[in.b].t)); break;
      case Op::Or: out = tri(tri_or(r[in.a].t, r[in.b].t)); break;
      case Op::Select: {
        Tri c = r[in.a].t;
        out = c == Tri::True    ? r[in.b]
              : c == Tri::False ? r[in.c]
                                : join(in.type, r[in.b], r[in.c]);
        break;
      }
      case Op::Eq:
      case Op::Ne:
      case Op::Lt:
      case Op::Le:
      case Op::Gt:
      case Op::Ge:
        if (in.a == in.b && in.arg_type != Type::F32) {
          // The same node on both sides (expressions are hash-consed): equal everywhere.
          out = tri(tri_of(in.op == Op::Eq || in.op == Op::Le || in.op == Op::Ge));
        } else if (in.arg_type == Type::Bool) {
          out = tri(bool_compare(in.op, r[in.a].t, r[in.b].t));
        } else if (in.arg_type == Type::I32) {
          out = tri(int_compare(in.op, r[in.a], r[in.b], box));
        } else {
          out = tri(float_compare(in.op, r[in.a], r[in.b]));
        }
        break;
      case Op::Neg:
      case Op::Abs:
      case Op::Exp:
      case Op::Exp2:
      case Op::Log:
      case Op::Log2:
      case Op::Tanh:
      case Op::Sqrt:
      case Op::Rsqrt:
        out = in.type == Type::I32 ? int_unary(in.op, r[in.a], box) : float_unary(in.op, r[in.a]);
        break;
      default:  // Add .. Max
        out = in.type == Type::I32 ? int_binary(in.op, r[in.a], r[in.b], box)
                                   : float_binary(in.op, r[in.a], r[in.b]);
    }
  }
  return r.back().t;
}

}  // namespace tilejit
