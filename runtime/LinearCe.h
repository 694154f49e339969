// Fused linear cross-entropy on the GPU: a loss program (compiler/Program.h) evaluated on hidden
// states E and the segments' weights without materializing the [N, V] logits
// (kernels_templates/linear_ce_*.cuh, generated glue from compiler/codegen/LossKernels.h).
//
//   Bindings bind{{"W_base", w_base}, {"W_extra", w_extra}, {"cap", 30.0f}};
//   LinearCeForward fwd = linear_cross_entropy_forward(prog, E, bind, targets, {}, stream);
//   // fwd.loss: device f32 scalar; fwd.row_loss, fwd.lse: device f32 [N]
//   LinearCeGradients g = linear_cross_entropy_backward(fwd, grad_loss, stream);
//   // g.d_hidden [N, D], g.d_weight[s] [V_s, D], g.d_bias[s] [V_s]: device f32
//
// Binding. One Bindings holds the segments' weights and biases under the names the program gives
// them (`segment base : [0, 151936) weight W_base bias b_base`) and the program's captured
// buffers and params. A name the program does not use is an error.
//
// Tensors (device memory; every mismatch is a UserError naming the tensor, raised before any
// launch):
//   E        [N, D] bf16 or f16, D a multiple of 8, last dim contiguous, rows 16-byte aligned
//   weight   [V_s, D], E's dtype, same layout rules;   bias [V_s], E's dtype, contiguous
//   targets  [N] i32 global ids, any stride (64-bit ids await an i64 DType in TensorView.h; the
//            device check already has an i64 entry). ignore_index rows contribute nothing. A
//            target that is neither ignore_index nor a live id (a dead id between segments, a
//            negative id, one past the layout) is an error: the forward checks them on the
//            device and reads the verdict back with the kept-row count (the forward synchronizes
//            `stream` once, because the kept-row count sizes every later grid).
//
// Outputs. Results are fp32 device tensors. A caller may pass its own (LinearCeOutputs,
// LinearCeGradOutputs: a framework's allocator, no allocation per step); any it leaves out is
// allocated by the library and owned by the returned object. Workspaces are allocated per call.
//
// Saved state. The forward result keeps what backward needs (lse, target logits, the kept rows of
// E, per-tile max logits) and *views* of the weights and captured buffers: those must stay alive
// and unchanged until the backward call. E itself is not needed by backward.
//
// Not supported on this path (UserError): a KL term, more than 4 segments.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/Program.h"
#include "compiler/codegen/LossKernels.h"
#include "runtime/Bindings.h"
#include "runtime/KernelCache.h"
#include "runtime/TensorView.h"

namespace tilejit {

struct LinearCeOptions {
  // Gradient filtering: backward skips every (128 rows x 128 ids) tile whose probabilities are
  // all below the threshold. < 0: the default for E's dtype (2^-12 for bf16, 2^-15 for f16,
  // well below what the 16-bit gradient staging resolves); 0: exact (no filtering). Label
  // smoothing with a non-identity logit_mod turns filtering off: the uniform smoothing term is
  // then part of every entry, so no tile is negligible.
  float filter_threshold = -1;
  // Every kernel on this path is deterministic (fixed summation orders, no atomics): results are
  // bit-identical run to run. false is accepted and currently selects the same kernels.
  bool deterministic = true;
  // Bound on the backward's bf16/f16 staging buffer for the gradient tiles (it works through the
  // vocabulary in chunks that fit).
  int64_t grad_buffer_bytes = int64_t{512} << 20;
};

// A segment's bound tensors, in the program's segment order.
struct SegmentBinding {
  TensorView weight;
  std::optional<TensorView> bias;
};

// Caller-provided forward outputs (each optional).
struct LinearCeOutputs {
  std::optional<TensorView> loss;      // f32, one element: the reduced loss (none: the sum)
  std::optional<TensorView> row_loss;  // f32 [N] contiguous, 0 on ignored rows
  std::optional<TensorView> lse;       // f32 [N] contiguous, 0 on ignored rows
};

struct LinearCeState;  // saved for backward (LinearCe.cpp)

struct LinearCeForward {
  TensorView loss;      // f32 [1]: mean / sum over kept rows as the program says
  TensorView row_loss;  // f32 [N]
  TensorView lse;       // f32 [N]: log-sum-exp of the modified logits over live ids
  int64_t n_rows = 0, n_kept = 0;
  float filter_threshold = 0;  // the one backward uses (0: exact)
  std::shared_ptr<const LinearCeState> state;
};

// Caller-provided gradient outputs, in segment order (an empty vector: all allocated).
struct LinearCeGradOutputs {
  std::optional<TensorView> d_hidden;               // f32 [N, D], last dim contiguous
  std::vector<std::optional<TensorView>> d_weight;  // f32 [V_s, D], last dim contiguous
  std::vector<std::optional<TensorView>> d_bias;    // f32 [V_s] contiguous (segments with bias)
};

struct LinearCeGradients {
  TensorView d_hidden;                            // f32 [N, D]; 0 on ignored rows
  std::vector<TensorView> d_weight;               // per segment
  std::vector<std::optional<TensorView>> d_bias;  // per segment, set when it has a bias
  // What the library allocated: outputs the caller did not give, and the backward's scratch
  // (the kernels may still be running when the call returns). Drop it to free them.
  std::shared_ptr<const void> storage;
};

LinearCeForward linear_cross_entropy_forward(const LossProgram& prog, const TensorView& hidden,
                                             const Bindings& segments_and_captures,
                                             const TensorView& targets,
                                             const LinearCeOptions& options, CUstream stream,
                                             const LinearCeOutputs& outputs = {});

// `grad_loss`: f32 device, [N] for reduction none, one element otherwise (dL/dloss).
LinearCeGradients linear_cross_entropy_backward(const LinearCeForward& forward,
                                                const TensorView& grad_loss, CUstream stream,
                                                const LinearCeGradOutputs& outputs = {});

// The segments' tensors from `bind`, checked against the program and E (UserError otherwise).
std::vector<SegmentBinding> bind_segments(const LossProgram& prog, const TensorView& hidden,
                                          const Bindings& bind);

// UserError unless the GPU path supports `prog` (no KL term, at most 4 segments).
void check_linear_ce_supported(const LossProgram& prog);

// Every kernel module `prog` needs for operands of `dtype` (bf16 or f16), as kernel-cache
// requests: what the CLI, the AOT bundler and the launches compile. Needs no GPU.
struct LinearCeModule {
  LossKernelSource source;
  KernelSpec spec;
};
std::vector<LinearCeModule> linear_ce_modules(const LossProgram& prog, DType dtype);

}  // namespace tilejit
