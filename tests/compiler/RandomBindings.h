// Random values for a program's captured buffers and params, and random evaluation points, for
// the compiler's property tests. The buffers own their host memory.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "compiler/Interpreter.h"
#include "compiler/Program.h"

namespace tilejit::testing {

// Sizes of the dimension names used by RandomProgram: small, so random indices often land
// outside the bound shape too.
int64_t dim_size(const std::string& dim);

class RandomBindings {
 public:
  RandomBindings(std::mt19937_64& rng, const std::vector<BufferDecl>& buffers,
                 const std::vector<ParamDecl>& params);
  // Views point into storage_: copies would share it, so only moves are allowed.
  RandomBindings(const RandomBindings&) = delete;
  RandomBindings(RandomBindings&&) = default;

  // A context with the buffers and params bound and random attention and loss variables (now
  // and then just outside their ranges).
  EvalContext point(std::mt19937_64& rng, FloatPrecision precision = FloatPrecision::F64) const;
  const EvalContext& bindings() const { return base_; }

 private:
  std::vector<std::vector<unsigned char>> storage_;
  EvalContext base_;
};

// Bit-exact equality of two values; any NaN equals any NaN, but -0.0 and +0.0 differ.
bool same_value(const Value& a, const Value& b);
std::string show(const Value& v);

}  // namespace tilejit::testing
