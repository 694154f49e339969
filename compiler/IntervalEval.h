// Interval evaluation of a mask over a box of index values: the second interpretation of a
// program (the first is compiler/Interpreter.h). Over b in [b0, b1], h in [h0, h1],
// q in [q0, q1], kv in [k0, k1] the mask evaluates to TRUE (every point of the box is kept),
// FALSE (every point is masked) or MAYBE. The rules are sound for every op of IR.h:
//
// - i32 nodes carry an interval; an operation whose result could leave i32 (and so wrap)
//   gives the whole i32 range. Division and modulo truncate, by zero give 0.
// - i32 nodes that are affine in b, h, q, kv (c_b b + c_h h + c_q q + c_kv kv + c, with
//   params folded in as constants) also carry that form, exact over the box. A comparison of
//   two such nodes compares the *difference* over the box, so q >= kv and q - kv < W
//   classify exactly, where independent intervals would not.
// - f32 nodes carry an interval widened outward at every operation (enough to cover f32
//   rounding, fp64 reference evaluation and the hardware approximations of transcendentals)
//   and a "may be NaN" flag.
// - bool nodes are three-valued; && || ! follow Kleene logic; a Select whose condition is
//   MAYBE joins both arms.
// - A Load's value range comes from a LoadOracle given the intervals of its indices (buffer
//   summaries, compiler/BufferSummary.h); an index range that leaves the bound shape must
//   include the 0 such reads return.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/IR.h"
#include "compiler/Interpreter.h"

namespace tilejit {

enum class Tri : uint8_t { False, True, Maybe };

// Inclusive ranges of b, h, q, kv (in that order); lo <= hi, all in [0, 2^31).
struct IndexBox {
  int64_t lo[4] = {0, 0, 0, 0};
  int64_t hi[4] = {0, 0, 0, 0};
};

// The values a buffer read can produce: i32 buffers give integers in [lo, hi]; float buffers
// give [lo, hi] plus NaN when `may_nan`.
struct ValueRange {
  double lo = 0, hi = 0;
  bool may_nan = false;
};

// Answers, for the k-th Load of an IntervalEval (IntervalEval::loads()), the values it can read
// when each index i lies in [lo[i], hi[i]] (i32 ranges).
class LoadOracle {
 public:
  virtual ~LoadOracle() = default;
  virtual ValueRange range(int load, const int64_t* lo, const int64_t* hi) const = 0;
};

class IntervalEval {
 public:
  // `params` holds the exact values of the params the expression reads (a missing one is a
  // UserError), as the interpreter takes them.
  IntervalEval(const Expr& mask, const std::map<std::string, ParamValue, std::less<>>& params);
  ~IntervalEval();
  IntervalEval(IntervalEval&&) noexcept;
  IntervalEval& operator=(IntervalEval&&) noexcept;

  // The mask over `box`. `loads` may be null when the expression reads no buffer. Not
  // thread-safe (scratch registers are reused): one IntervalEval per thread.
  Tri eval(const IndexBox& box, const LoadOracle* loads) const;

  // The distinct Load nodes, in the order the oracle numbers them.
  const std::vector<Expr>& loads() const;
  // Which index variables (0 b, 1 h, 2 q, 3 kv) the expression reads.
  bool uses(int var) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilejit
