// One loss benchmark problem on the device (linear_ce_gpu_bench): a shape's weights, hidden
// states, targets and bindings uploaded from its host data (ce_bench_data.h), with the outputs the
// caller owns, as a training framework's allocator would give them: the forward's (loss, row_loss,
// lse) and the gradients (dE, dC), NaN-poisoned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/ce_bench_data.h"
#include "bench/ce_bench_shapes.h"
#include "bench/device_tensor.h"
#include "runtime/Bindings.h"
#include "runtime/LinearCe.h"

namespace tilejit::bench {

// One shape's problem of one data kind on the device.
struct CeProblem {
  std::vector<DeviceTensor> weights;
  DeviceTensor hidden, teacher, targets, grad_loss;
  // The forward's outputs, the caller's as the Python binding gives them (an output the library
  // allocates is freed with cuMemFree, which waits for the device: a step would end in a wait
  // that a training step, whose framework allocates its outputs, does not have).
  DeviceTensor loss, row_loss, lse;
  Bindings bind;
  int64_t kept_rows = 0;
};

CeProblem upload_problem(const CeShape& shape, const CeHostData& data);

// Gradient outputs the caller owns (a framework's allocator would give them), poisoned with NaN.
struct GradOutputs {
  std::vector<DeviceTensor> tensors;  // d_hidden, then d_weight per segment
  LinearCeGradOutputs views;
  int64_t bytes = 0;
};

// dE in f32, dC in f32 or (weight_grad_16) in E's dtype, bf16 here.
GradOutputs grad_outputs(const CeShape& shape, bool weight_grad_16);

}  // namespace tilejit::bench
