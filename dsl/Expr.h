// The embedded C++ DSL: build IR expressions with ordinary operators.
//
//   using namespace tilejit::dsl;
//   Buffer doc("doc", ElemType::I32, {"B", "S"});
//   Expr mask = doc(b, q) == doc(b, kv) && q >= kv;
//
// Operands are promoted as in C for i32/f32 (an i32 meeting an f32 becomes f32); bool never
// mixes with numbers. Misuse (e.g. `q && kv`) is a UserError naming the expression.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/IR.h"

namespace tilejit {

// Literals.
Expr lit(bool v);
Expr lit(int v);
Expr lit(int64_t v);
Expr lit(double v);
inline Expr lit(float v) { return lit(static_cast<double>(v)); }
inline Expr lit(const Expr& e) { return e; }

// Arithmetic, comparison and logic. Each has (Expr, Expr) plus literal overloads.
#define TILEJIT_DSL_BINARY(fn)                                           \
  Expr fn(const Expr& a, const Expr& b);                                 \
  inline Expr fn(const Expr& a, int b) { return fn(a, lit(b)); }         \
  inline Expr fn(int a, const Expr& b) { return fn(lit(a), b); }         \
  inline Expr fn(const Expr& a, double b) { return fn(a, lit(b)); }      \
  inline Expr fn(double a, const Expr& b) { return fn(lit(a), b); }
TILEJIT_DSL_BINARY(operator+)
TILEJIT_DSL_BINARY(operator-)
TILEJIT_DSL_BINARY(operator*)
TILEJIT_DSL_BINARY(operator/)
TILEJIT_DSL_BINARY(operator%)
TILEJIT_DSL_BINARY(operator==)
TILEJIT_DSL_BINARY(operator!=)
TILEJIT_DSL_BINARY(operator<)
TILEJIT_DSL_BINARY(operator<=)
TILEJIT_DSL_BINARY(operator>)
TILEJIT_DSL_BINARY(operator>=)
TILEJIT_DSL_BINARY(min)
TILEJIT_DSL_BINARY(max)
#undef TILEJIT_DSL_BINARY
Expr operator&&(const Expr& a, const Expr& b);
Expr operator||(const Expr& a, const Expr& b);
inline Expr operator&&(const Expr& a, bool b) { return a && lit(b); }
inline Expr operator||(const Expr& a, bool b) { return a || lit(b); }
Expr operator!(const Expr& a);
Expr operator-(const Expr& a);

Expr abs(const Expr& a);
Expr exp(const Expr& a);
Expr exp2(const Expr& a);
Expr log(const Expr& a);
Expr log2(const Expr& a);
Expr tanh(const Expr& a);
Expr sqrt(const Expr& a);
Expr rsqrt(const Expr& a);
Expr select(const Expr& cond, const Expr& a, const Expr& b);
Expr cast(Type to, const Expr& a);
inline Expr f32(const Expr& a) { return cast(Type::F32, a); }
inline Expr i32(const Expr& a) { return cast(Type::I32, a); }

// Apply an operator by IR kind with the DSL's promotion and checks (the text parser uses this).
Expr apply(Op op, const std::vector<Expr>& args);

namespace dsl {
// Index variables (i32) and value variables (f32).
extern const Expr b, h, q, kv;  // attention
extern const Expr row, id;      // loss
extern const Expr score, logit;

// A captured buffer: `doc(b, q)` reads it. Declare it in the program that reads it.
class Buffer {
 public:
  Buffer(std::string name, ElemType elem, std::vector<std::string> dims);
  template <typename... Ix>
  Expr operator()(const Ix&... ix) const {
    return read({lit(ix)...});
  }
  Expr read(std::vector<Expr> indices) const;
  const std::string& name() const { return name_; }
  ElemType elem() const { return elem_; }
  const std::vector<std::string>& dims() const { return dims_; }

 private:
  std::string name_;
  ElemType elem_;
  std::vector<std::string> dims_;
};

// A runtime scalar; converts to an expression.
class Param {
 public:
  Param(std::string name, Type type = Type::F32);
  operator Expr() const { return expr_; }  // NOLINT: intended implicit use in expressions
  Expr expr() const { return expr_; }
  const std::string& name() const { return name_; }
  Type type() const { return type_; }

 private:
  std::string name_;
  Type type_;
  Expr expr_;
};
}  // namespace dsl

}  // namespace tilejit
