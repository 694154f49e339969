// Fused linear cross-entropy on the CPU (compiler/IR.h "Loss"): logits = E C_s^T + bias over a
// layout of vocabulary segments, logit_mod per element, cross-entropy with label smoothing,
// z-loss, ignore_index and the reductions. The [N, V] logits never exist: rows are processed in
// chunks against vocabulary chunks, with an online log-sum-exp in fp32 (the forward keeps O(N)
// state; the backward recomputes logit chunks). Deterministic: every output element is
// accumulated by one task in a fixed order (dE by row chunk, dC and dbias by vocabulary chunk).
// The KL term is not supported on the CPU (a UserError).
#pragma once

#include <vector>

#include "compiler/Program.h"
#include "runtime/TensorView.h"
#include "runtime/cpu/RowHooks.h"
#include "runtime/cpu/ThreadPool.h"

namespace tilejit {

// Host tensors. hidden [N, D] and weights[s] [V_s, D] are f32, bf16 or f16 (last dimension
// contiguous); targets [N] i32 global ids or the program's ignore_index; biases[s] [V_s] for each
// segment that names a bias (the vector may be empty when none does).
struct CpuLinearCeInputs {
  TensorView hidden, targets;
  std::vector<TensorView> weights, biases;
};

// f32 [N] outputs; ignored rows get 0. target_logit (the modded logit of the target) is optional:
// a view without data is not written.
struct CpuLinearCeForwardOutputs {
  TensorView lse, row_loss, target_logit;
};

// The upstream gradient is grad_loss for reductions sum and mean, grad_rows [N] f32 for none.
// Outputs: d_hidden like hidden, d_weights[s] like weights[s], d_biases[s] like biases[s] (for
// segments with a bias). lse comes from the forward.
struct CpuLinearCeBackwardArgs {
  TensorView lse;
  float grad_loss = 1;
  TensorView grad_rows;
  TensorView d_hidden;
  std::vector<TensorView> d_weights, d_biases;
};

// Returns the reduced loss (reduction none: the sum of the row losses).
double cpu_linear_ce_forward(const LossRowHooks& hooks, const LossProgram& program,
                             const CpuLinearCeInputs& inputs,
                             const CpuLinearCeForwardOutputs& outputs,
                             ThreadPool& pool = ThreadPool::shared());
void cpu_linear_ce_backward(const LossRowHooks& hooks, const LossProgram& program,
                            const CpuLinearCeInputs& inputs, const CpuLinearCeBackwardArgs& args,
                            ThreadPool& pool = ThreadPool::shared());

}  // namespace tilejit
