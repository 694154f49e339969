// The tilejit IR: a typed expression DAG shared by every pass and backend.
//
// Semantics (the single statement every pass, backend and test agrees with)
// ------------------------------------------------------------------------
// Attention. Inputs Q [B, Hq, Sq, D], K, V [B, Hkv, Skv, D] (strided; Hq a multiple of Hkv:
// GQA/MQA). Index variables b, h, q, kv are int32; h is the *query* head; q, kv are absolute
// positions 0..Sq-1, 0..Skv-1. score = scale * <Q[b,h,q], K[b,h/g,kv]> (default
// scale = 1/sqrt(D)), then score_mod(score, b, h, q, kv) in fp32, then the mask: an element with
// mask_mod(b, h, q, kv) == false has probability exactly 0. A row whose every element is masked
// outputs 0 and lse = -inf, never NaN. score_mod and buffer reads are evaluated only at in-range
// positions where the mask is true. The kernel returns O and lse (natural log, fp32). Backward
// computes dQ, dK, dV given dO and the forward's lse, using d score_mod / d score, which the
// compiler derives symbolically (compiler/Differentiate.h).
//
// Loss. Hidden states E [N, D]; a layout of vocabulary segments, each a weight C_s [V_s, D]
// (optional bias) at a global id range [o_s, o_s + V_s); ids in no segment are dead (never a
// target, nothing in the lse). Targets [N] are global ids; ignore_index rows contribute nothing.
// logit_mod(logit, row, id) applies per element. Terms: cross-entropy, label smoothing eps
// (uniform over live ids), z-loss lambda*lse^2, optional KL against a teacher, blended as
// (1-alpha)*CE + alpha*KL with temperature T. Reductions: none, sum, mean over kept rows.
// Exactly, for a kept row with target y, z_j = logit_mod(x_j, row, j) over the L live ids j and
// lse = log sum_j exp(z_j):
//   CE  = (1-eps) (lse - z_y) + eps (lse - (1/L) sum_j z_j)
//   row = (1-alpha) CE + lambda lse^2 + alpha T^2 KL(p_t || p_s)
//   p_s = softmax(z / T),  p_t = softmax(t / T),  KL(p_t || p_s) = sum_j p_t,j log(p_t,j / p_s,j)
// (alpha = 0 without a kl term). The z-loss stays outside the blend; T^2 keeps the KL gradient's
// scale independent of T (the usual distillation loss). The teacher's logits
// t_j = logit_mod(E_t[row] . Ct_j + bt_j, row, j) go through the same logit_mod as the student's
// (the program's head), from the teacher's hidden states E_t and its layout (the student's weights
// when it names none); the teacher is frozen (no gradients). Ignored rows contribute nothing to
// either term.
//
// Captured values. Buffers are named, typed (i32, f32, bf16, f16), with a rank and named
// dimensions; params are named runtime scalars (f32 or i32). Both are bound at launch: changing
// a value or a sequence length never recompiles.
//
// Scalar semantics of the nodes below
// -----------------------------------
// Types are bool, i32 and f32. Every node has exactly one type; operands of a binary node have
// the same type (the DSL inserts casts, the validator checks).
// - i32 arithmetic wraps (two's complement). Div truncates toward zero, Mod takes the sign of
//   the dividend (C semantics); division or modulo by zero yields 0.
// - f32 arithmetic is IEEE single precision; Mod on f32 is fmod. Backends may use hardware
//   approximations for division (at most 2 ulp), exp/exp2/log/log2/rsqrt (a few ulp) and tanh
//   (relative error up to 2^-11, the PTX tanh.approx.f32 bound: below bf16 precision, which is
//   what scores feed); the interpreter evaluates floats in fp64 and is the reference. f32
//   division by zero gives inf or NaN as in IEEE. Min and Max on f32 are fmin/fmax: a NaN operand yields the other operand.
// - Cast f32 -> i32 truncates toward zero and saturates; NaN -> 0. Cast bool -> i32/f32 is 0/1.
//   Cast i32/f32 -> bool is "!= 0".
// - And / Or / Not are on bool. Select(c, a, b) evaluates to a when c else b; only the chosen
//   operand's buffer reads happen.
// - Load(buffer, i0, ..., ik) reads element [i0, ..., ik] of a captured buffer; bf16/f16
//   buffers read as f32. An index outside the bound shape reads 0 and touches no memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tilejit {

// Scalar type of an expression.
enum class Type : uint8_t { Bool, I32, F32 };
// Storage type of a captured buffer element.
enum class ElemType : uint8_t { I32, F32, BF16, F16 };

std::string_view type_name(Type t);           // "bool", "i32", "f32"
std::string_view elem_type_name(ElemType t);  // "i32", "f32", "bf16", "f16"
Type value_type(ElemType t);                  // type of a Load from such a buffer
size_t elem_size(ElemType t);

// The one list of node kinds: X(name, arity, spelling). arity -1 = variadic (Load).
// Spelling is the text-form spelling: an infix operator, a function name, or a keyword.
#define TILEJIT_IR_NODES(X)  \
  X(ConstBool, 0, "bool")    \
  X(ConstInt, 0, "int")      \
  X(ConstFloat, 0, "float")  \
  X(Var, 0, "var")           \
  X(Param, 0, "param")       \
  X(Load, -1, "load")        \
  X(Cast, 1, "cast")         \
  X(Neg, 1, "-")             \
  X(Not, 1, "!")             \
  X(Abs, 1, "abs")           \
  X(Exp, 1, "exp")           \
  X(Exp2, 1, "exp2")         \
  X(Log, 1, "log")           \
  X(Log2, 1, "log2")         \
  X(Tanh, 1, "tanh")         \
  X(Sqrt, 1, "sqrt")         \
  X(Rsqrt, 1, "rsqrt")       \
  X(Add, 2, "+")             \
  X(Sub, 2, "-")             \
  X(Mul, 2, "*")             \
  X(Div, 2, "/")             \
  X(Mod, 2, "%")             \
  X(Min, 2, "min")           \
  X(Max, 2, "max")           \
  X(Eq, 2, "==")             \
  X(Ne, 2, "!=")             \
  X(Lt, 2, "<")              \
  X(Le, 2, "<=")             \
  X(Gt, 2, ">")              \
  X(Ge, 2, ">=")             \
  X(And, 2, "&&")            \
  X(Or, 2, "||")             \
  X(Select, 3, "select")

enum class Op : uint8_t {
#define TILEJIT_X(name, arity, spelling) name,
  TILEJIT_IR_NODES(TILEJIT_X)
#undef TILEJIT_X
};

std::string_view op_name(Op op);      // "Add"
std::string_view op_spelling(Op op);  // "+"
int op_arity(Op op);                  // -1 for Load
bool is_comparison(Op op);            // Eq..Ge
bool is_transcendental(Op op);        // Exp..Rsqrt (always f32 -> f32)

struct Node;

// A handle to an immutable, hash-consed node. Two structurally equal expressions are the same
// node, so identity (same_as) is structural equality. operator== is NOT defined here: the DSL
// (dsl/Expr.h) overloads it to build Eq nodes.
class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const Node> n) : node_(std::move(n)) {}

  const Node* get() const { return node_.get(); }
  const Node* operator->() const { return node_.get(); }
  const Node& operator*() const { return *node_; }
  bool defined() const { return node_ != nullptr; }
  bool same_as(const Expr& o) const { return node_ == o.node_; }

  Op op() const;
  Type type() const;
  const Expr& arg(size_t i) const;
  size_t num_args() const;

 private:
  std::shared_ptr<const Node> node_;
};

struct Node {
  Op op;
  Type type;
  int64_t ival = 0;        // ConstBool (0/1), ConstInt
  double fval = 0;         // ConstFloat: always a value exactly representable in f32
  std::string name;        // Var, Param, Load (buffer name)
  std::vector<Expr> args;  // operands; Load: indices
  size_t hash = 0;         // structural hash (children by identity)
};

inline Op Expr::op() const { return node_->op; }
inline Type Expr::type() const { return node_->type; }
inline const Expr& Expr::arg(size_t i) const { return node_->args[i]; }
inline size_t Expr::num_args() const { return node_->args.size(); }

struct ExprHash {
  size_t operator()(const Expr& e) const { return std::hash<const Node*>()(e.get()); }
};
struct ExprSame {
  bool operator()(const Expr& a, const Expr& b) const { return a.same_as(b); }
};

// Index and value variables, by the name used in programs and in the text form.
namespace var {
inline constexpr std::string_view b = "b", h = "h", q = "q", kv = "kv";  // attention
inline constexpr std::string_view row = "row", id = "id";                 // loss
inline constexpr std::string_view score = "score", logit = "logit";       // values (f32)
}  // namespace var

// Raw constructors. They intern the node and do NO type checking beyond what is needed to
// compute a node's type; programs are type-checked by compiler/Validate.h. Use the DSL
// (dsl/Expr.h) to build expressions with type promotion and user-facing errors.
namespace ir {
Expr make_bool(bool v);
Expr make_int(int64_t v);    // value must fit i32 (internal error otherwise)
Expr make_float(double v);   // rounded to the nearest f32
Expr make_var(std::string_view name);  // type from the name: score/logit f32, others i32
Expr make_param(std::string_view name, Type t);
Expr make_load(std::string_view buffer, Type value_type, std::vector<Expr> indices);
Expr make_cast(Type to, Expr a);
// Unary (Neg..Rsqrt), binary (Add..Or) and Select; the result type follows the operands:
// comparisons give bool, transcendentals f32, Select the type of its second operand.
Expr make(Op op, std::vector<Expr> args);

// Variables an expression reads, and whether it reads any buffer.
bool uses_var(const Expr& e, std::string_view name);
bool reads_buffers(const Expr& e);
// A node without operands: a constant, a variable or a param.
bool is_leaf(const Expr& e);
// Number of distinct nodes in the DAG (for logging and limits).
size_t dag_size(const Expr& e);
// Post-order visit of the distinct nodes of a DAG (each node once, operands first).
void visit_post_order(const Expr& e, const std::function<void(const Expr&)>& f);
// Rebuild an expression bottom-up: f receives a node whose operands were already rebuilt
// (as `args`) and returns its replacement. Shared nodes are rebuilt once.
Expr rebuild(const Expr& e, const std::function<Expr(const Expr& old, std::vector<Expr> args)>& f);
}  // namespace ir

}  // namespace tilejit
