// One run of the CPU fused linear cross-entropy (runtime/cpu/CpuLinearCe.h) on fresh random
// inputs for a loss program, forward and backward, checked against the fp64 reference
// (tests/support/LinearCeReference.h) that materialises the logits. Every output is poisoned
// with NaN first, so an element left unwritten fails. With a KL term the teacher gets its own
// hidden states (and weights, when the program names a teacher layout). With gradient filtering
// the gradients may differ from the dense reference by at most what the reference says a filter
// may drop.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/TensorView.h"
#include "runtime/cpu/CpuLinearCe.h"

namespace tilejit::testing {

struct LinearCeCase {
  int64_t rows = 70, dim = 24;
  int64_t teacher_dim = 0;  // D_t of a teacher layout; 0: dim
  DType dtype = DType::F32;
  DType target_dtype = DType::I32;
  double ignored_fraction = 0.2;
  uint64_t seed = 3;
  float grad_loss = 0.75f;
  double hidden_amplitude = 1.0;  // larger: more peaked distributions
  float filter_threshold = 0;     // as CpuLinearCeBackwardArgs::filter_threshold
};

// Runs and checks the case (GoogleTest expectations); returns the backward's filter statistics.
CpuLinearCeBackwardStats check_linear_ce_case(const std::string& program_text,
                                              const LinearCeCase& c);

}  // namespace tilejit::testing
