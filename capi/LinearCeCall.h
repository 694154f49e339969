// Fused linear cross-entropy wherever its tensors live, behind one calling convention: device
// memory runs the GPU path (runtime/LinearCe.h), host memory the CPU executor
// (runtime/cpu/CpuLinearCe.h), the way runtime/Attention.h serves attention. The segments'
// weights and biases and the program's captured values come in one Bindings, under the names
// the program gives them; outputs are the GPU API's optional views.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "compiler/Program.h"
#include "runtime/Bindings.h"
#include "runtime/LinearCe.h"
#include "runtime/TensorView.h"

namespace tilejit::capi {

// What a forward saved for its backward.
class LinearCeRun {
 public:
  virtual ~LinearCeRun() = default;
  virtual int64_t rows() const = 0;
  virtual int64_t kept_rows() const = 0;  // rows whose target is not ignore_index
  // Gradients into `outputs`: d_hidden and every segment's d_weight given, d_bias given exactly
  // for the segments with a bias. `grad_loss`: f32, one element, or [N] for reduction none.
  virtual void backward(const TensorView& grad_loss, const LinearCeGradOutputs& outputs,
                        CUstream stream) = 0;
};

// The tensors of a forward call. teacher_hidden [N, D_t]: only for a program with a KL term.
struct LinearCeInputViews {
  TensorView hidden, targets;
  std::optional<TensorView> teacher_hidden;
};

// UserError unless the backend that `hidden`'s placement selects supports `prog` and the
// inputs' dtypes (the GPU takes no KL term yet, at most 4 segments, bf16 or f16 operands and
// i32 targets).
void check_linear_ce_supported(const LossProgram& prog, const LinearCeInputViews& inputs);

// The forward into the given outputs (each optional). The weights and biases of the student's
// and the teacher's segments come from `bindings` by name. Tensor and binding problems are
// UserErrors naming the tensor, buffer or param.
std::unique_ptr<LinearCeRun> linear_ce_forward(const LossProgram& prog,
                                               const LinearCeInputViews& inputs,
                                               const Bindings& bindings,
                                               const LinearCeOptions& options, CUstream stream,
                                               const LinearCeOutputs& outputs);

}  // namespace tilejit::capi
