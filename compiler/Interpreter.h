// The elementwise reference: evaluates an expression at one point, exactly as IR.h defines it.
//
// Floats are evaluated in fp64 by default: the interpreter is the reference that backends are
// measured against, and fp64 keeps its own rounding far below theirs. With
// FloatPrecision::F32 every float result (each operation, each cast to f32, each read of
// score/logit) is rounded to f32 instead, which is what f32 hardware computes for + - * / sqrt
// and fmod, and what the simplifier's constant folding does; tests use it to check that
// simplification never changes a value, bit for bit. Integers follow the i32 rules of IR.h
// exactly (wrap, truncating division, division by zero gives 0, saturating casts), loads read 0
// outside the bound shape, and Select evaluates only the operand it chooses.
//
// Min and Max on f32 follow fmin/fmax (IEEE minNum/maxNum): a NaN operand yields the other.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "compiler/IR.h"

namespace tilejit {

// A read-only view of a captured buffer in host memory.
struct BufferView {
  const void* data = nullptr;
  ElemType elem = ElemType::I32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // in elements; empty means contiguous row-major
};

// The value of a runtime param: an i32 param takes an integer, an f32 param either (an f32
// param is rounded to f32, as the kernel receives it).
using ParamValue = std::variant<int64_t, double>;

enum class FloatPrecision : uint8_t { F64, F32 };

// Everything an expression may read at one point.
struct EvalContext {
  int64_t b = 0, h = 0, q = 0, kv = 0;  // attention index variables
  int64_t row = 0, id = 0;              // loss index variables
  double score = 0, logit = 0;          // value variables
  std::map<std::string, ParamValue, std::less<>> params;
  std::map<std::string, BufferView, std::less<>> buffers;
  FloatPrecision precision = FloatPrecision::F64;
};

// A scalar of one IR type: the member matching `type` holds it.
struct Value {
  Type type = Type::Bool;
  bool b = false;
  int32_t i = 0;
  double f = 0;

  static Value of_bool(bool v) { return {Type::Bool, v, 0, 0}; }
  static Value of_int(int32_t v) { return {Type::I32, false, v, 0}; }
  static Value of_float(double v) { return {Type::F32, false, 0, v}; }
  double as_double() const;  // bool 0/1, i32 exactly, f32 as is
};

// Evaluates `e` at the point described by `ctx`. A param or buffer the expression reads but
// `ctx` lacks, or a buffer bound with the wrong element type or rank, is a UserError.
Value evaluate(const Expr& e, const EvalContext& ctx);

// The fallback CPU path: an expression compiled once into a flat list of register
// instructions (operands before users, each node once), then evaluated at many points without
// any lookup by name. Used by the CPU executors when no native code generator is available, and
// by the reference block-mask builder. Results are identical to `evaluate` with the same
// precision: both share one implementation of every operation. Every operand of a Select is
// computed (the choice is made afterwards); this is invisible because reads have no side effects
// and are defined everywhere. Params and buffers are resolved when compiling, from `bindings`;
// the buffers' memory must outlive the CompiledEval. Evaluation is const and thread-safe.
class CompiledEval {
 public:
  CompiledEval(const Expr& e, const EvalContext& bindings);

  Type type() const { return type_; }
  // Full evaluation; reads the variables, not the params or buffers, of `vars`.
  Value eval(const EvalContext& vars) const;
  // Hot paths for the three program expressions (the type must match: internal error if not).
  bool eval_mask(int64_t b, int64_t h, int64_t q, int64_t kv) const;
  double eval_score(double score, int64_t b, int64_t h, int64_t q, int64_t kv) const;
  double eval_logit(double logit, int64_t row, int64_t id) const;

  // Opaque to users; public so functions private to the implementation can name them.
  union Slot {
    double f;
    int32_t i;  // i32 and bool (0/1)
  };
  struct Instr;

 private:
  Slot run(const int32_t* index_vars, double score, double logit) const;

  Type type_;
  bool round_f32_;
  std::vector<Instr> code_;
  std::vector<int32_t> load_indices_;  // registers of each Load's indices, back to back
  std::vector<BufferView> buffers_;
};

struct CompiledEval::Instr {
  Op op;
  Type type;        // result type
  Type arg_type;    // type of the first operand (comparisons and casts dispatch on it)
  uint8_t var;      // Var: 0..5 = b, h, q, kv, row, id; 6 = score; 7 = logit
  int32_t a, b, c;  // operand registers; Load: first index slot, count, buffer
  Slot imm;         // constants and params
};

}  // namespace tilejit
