// Fused linear cross-entropy on the CPU (compiler/IR.h "Loss"): logits = E C_s^T + bias over a
// layout of vocabulary segments, logit_mod per element, cross-entropy with label smoothing,
// z-loss, the KL term against a teacher, ignore_index and the reductions. The [N, V] logits never
// exist: rows are processed in chunks against vocabulary chunks, with online log-sum-exps in
// fp32 (the forward keeps O(N) state; the backward recomputes logit chunks, the teacher's too).
// Deterministic: every output element is accumulated by one task in a fixed order (dE by row
// chunk, dC and dbias by vocabulary chunk).
//
// Gradient filtering: the backward skips the products of every (row, vocabulary chunk of 256
// ids) whose gradient entries are negligible, as LinearCeOptions::filter_threshold says
// (runtime/LinearCe.h): every probability that enters the gradient there (the softmax, and with
// a KL term both tempered distributions) is below the threshold, the target excepted; the target
// entry is always kept, and the uniform smoothing term is added analytically.
#pragma once

#include <cstdint>
#include <vector>

#include "compiler/Program.h"
#include "runtime/TensorView.h"
#include "runtime/cpu/RowHooks.h"
#include "runtime/cpu/ThreadPool.h"

namespace tilejit {

// Host tensors. hidden [N, D] and weights[s] [V_s, D] are f32, bf16 or f16 (last dimension
// contiguous); targets [N] i32 or i64 global ids or the program's ignore_index; biases[s] [V_s]
// for each segment that names a bias (the vector may be empty when none does).
// A program with a KL term also takes the teacher's hidden states teacher_hidden [N, D_t] and,
// when it names a teacher layout, that layout's weights teacher_weights[s] [V_s, D_t] and biases
// teacher_biases[s], in teacher segment order. Without a teacher layout the teacher uses the
// student's weights and biases (teacher_weights stays empty and D_t = D). The teacher is frozen:
// it gets no gradients.
struct CpuLinearCeInputs {
  TensorView hidden = {}, targets = {};
  std::vector<TensorView> weights = {}, biases = {};
  TensorView teacher_hidden = {};
  std::vector<TensorView> teacher_weights = {}, teacher_biases = {};
};

// f32 [N] outputs; ignored rows get 0. target_logit (the modded logit of the target) is optional:
// a view without data is not written. With a KL term the backward also needs tempered_lse (the
// log-sum-exp of the student's modded logits / T) and teacher_lse (the same of the teacher's):
// both are then required.
struct CpuLinearCeForwardOutputs {
  TensorView lse = {}, row_loss = {}, target_logit = {};
  TensorView tempered_lse = {}, teacher_lse = {};
};

// The upstream gradient is grad_loss for reductions sum and mean, grad_rows [N] f32 for none.
// Outputs: d_hidden like hidden, d_weights[s] like weights[s], d_biases[s] like biases[s] (for
// segments with a bias). lse (and with a KL term tempered_lse and teacher_lse) come from the
// forward. filter_threshold: as LinearCeOptions::filter_threshold (< 0: the default for E's
// dtype, 2^-12 for bf16, 2^-15 for f16, 0 for f32; 0: exact; label smoothing below alpha = 1
// with a non-identity logit_mod turns filtering off).
struct CpuLinearCeBackwardArgs {
  TensorView lse = {};
  float grad_loss = 1;
  TensorView grad_rows = {};
  TensorView d_hidden = {};
  std::vector<TensorView> d_weights = {}, d_biases = {};
  TensorView tempered_lse = {}, teacher_lse = {};
  float filter_threshold = -1;
};

// What the backward's filter did: (kept row, vocabulary chunk) pairs in all, and those whose
// products it skipped.
struct CpuLinearCeBackwardStats {
  int64_t pairs = 0, skipped = 0;
  float filter_threshold = 0;  // the one used
};

// Returns the reduced loss (reduction none: the sum of the row losses).
double cpu_linear_ce_forward(const LossRowHooks& hooks, const LossProgram& program,
                             const CpuLinearCeInputs& inputs,
                             const CpuLinearCeForwardOutputs& outputs,
                             ThreadPool& pool = ThreadPool::shared());
CpuLinearCeBackwardStats cpu_linear_ce_backward(const LossRowHooks& hooks,
                                                const LossProgram& program,
                                                const CpuLinearCeInputs& inputs,
                                                const CpuLinearCeBackwardArgs& args,
                                                ThreadPool& pool = ThreadPool::shared());

}  // namespace tilejit
