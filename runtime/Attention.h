// Block-sparse attention through the JIT path: a program's mask_mod and score_mod become the
// hooks of the hand-written kernels (compiler/codegen/AttentionKernels.h), compiled by NVRTC on
// first use (kernel cache), loaded once per context and launched on the caller's stream.
//
//   BlockMask mask = analyse_block_mask(lower(prog), host_bind, {.batch = B, .seq_q = S,
//                                                                .seq_kv = S});
//   attention_forward(prog, q, k, v, bind, mask, {}, stream, out, lse);
//   attention_backward(prog, q, k, v, out, lse, d_out, bind, mask, {}, stream, dq, dk, dv);
//
// Outputs are views the caller allocates (the host framework owns its memory and its
// allocator; tilejit allocates only its own scratch: the block mask's device copy, delta and
// the fp32 dQ accumulator). Every output element is written; nothing is accumulated into.
//
// Tensors are [B, H, S, D] by shape with any strides whose last dimension is contiguous, so a
// [B, S, H, D] buffer is passed as a permuted view. q, out, d_out, dq: [B, Hq, Sq, D];
// k, v, dk, dv: [B, Hkv, Skv, D] with Hq a multiple of Hkv (GQA / MQA); lse: [B, Hq, Sq] f32,
// contiguous, natural log (-inf for a fully masked row, whose output is 0).
//
// Where the work runs follows the tensors: all in device memory -> the GPU kernels (bf16 or
// f16, head dim 64 or 128, 16-byte aligned rows: data pointers 16-byte aligned and the B, H, S
// strides multiples of 8 elements; the block mask built with block_q = 128, block_kv = 64);
// on sm_90a the forward runs the Hopper kernel (wgmma + TMA), which also needs non-negative
// strides (AttentionOptions::forward_path and TILEJIT_ATTENTION_PATH choose otherwise); the
// backward too (AttentionOptions::backward_path and TILEJIT_ATTENTION_BWD_PATH choose
// otherwise), with the same needs;
// all in host memory -> the CPU executor (runtime/cpu/CpuAttention.h; f32, bf16 or f16, any head
// dim, any tile sizes). Bound buffers live where the tensors do. Mixing is a UserError.
//
// Every check happens before anything is launched and reports a UserError naming the tensor.
// Shapes, strides, bound values and the block mask never select a kernel: only the program's
// structure, the dtype, the head dim and the device's architecture do.
#pragma once

#include <cuda.h>

#include <optional>
#include <string>
#include <vector>

#include "compiler/Program.h"
#include "compiler/codegen/AttentionKernels.h"
#include "runtime/Bindings.h"
#include "runtime/BlockMask.h"
#include "runtime/KernelCache.h"
#include "runtime/TensorView.h"

namespace tilejit {

// Which GPU kernels run: the portable ones (mma.sync, any sm_80+ device) or the Hopper ones
// (wgmma + TMA, sm_90a only).
enum class AttentionPath : uint8_t { Auto, Portable, Sm90 };

struct AttentionOptions {
  std::optional<float> scale;  // multiplies <q, k> before score_mod; default 1 / sqrt(D)
  // Backward without atomics: dQ is bit-identical run to run (dK and dV always are). The CPU
  // executor is always deterministic.
  bool deterministic = false;
  // Auto: TILEJIT_ATTENTION_PATH=portable|sm90 when set, else Sm90 on sm_90a devices and
  // Portable elsewhere. Asking for Sm90 elsewhere is a UserError.
  AttentionPath forward_path = AttentionPath::Auto;
  // Auto: TILEJIT_ATTENTION_BWD_PATH=portable|sm90 when set, else Sm90 on sm_90a devices and
  // Portable elsewhere. Asking for Sm90 on another arch is a UserError. Deterministic mode with Sm90 computes dK and dV on the
  // Hopper kernel and dQ with the portable deterministic kernel.
  AttentionPath backward_path = AttentionPath::Auto;
};

// O = softmax(mask(score_mod(scale * Q K^T))) V and its log-sum-exp, into `out` and `lse`.
void attention_forward(const AttentionProgram& program, const TensorView& q, const TensorView& k,
                       const TensorView& v, const Bindings& bindings, const BlockMask& block_mask,
                       const AttentionOptions& options, CUstream stream, const TensorView& out,
                       const TensorView& lse);

// dQ, dK, dV from the forward's inputs, its `out` and `lse`, and the output gradient `d_out`.
// `block_mask`, `bindings` and `options.scale` must be the forward's.
void attention_backward(const AttentionProgram& program, const TensorView& q, const TensorView& k,
                        const TensorView& v, const TensorView& out, const TensorView& lse,
                        const TensorView& d_out, const Bindings& bindings,
                        const BlockMask& block_mask, const AttentionOptions& options,
                        CUstream stream, const TensorView& dq, const TensorView& dk,
                        const TensorView& dv);

// The forward module that runs for `path` on a device compiled for `arch` ("sm_90a", ...),
// reading TILEJIT_ATTENTION_PATH when `path` is Auto; a UserError for Sm90 on another arch or an
// unknown TILEJIT_ATTENTION_PATH value.
AttentionModule attention_forward_module(AttentionPath path, const std::string& arch);

// The main backward module that runs for `path` on a device compiled for `arch` (Backward,
// BackwardDeterministic, BackwardSm90 or BackwardSm90Deterministic), reading
// TILEJIT_ATTENTION_BWD_PATH when `path` is Auto; a UserError for Sm90 on another arch or an
// unknown TILEJIT_ATTENTION_BWD_PATH value.
AttentionModule attention_backward_module(AttentionPath path, const std::string& arch,
                                          bool deterministic);

// The GPU kernel variant for a tensor dtype and head dim; a UserError listing what is supported
// for anything else. `largest_index` (the largest of batch, query heads and both sequence
// lengths) picks the kernels whose hooks assume positions below kPositionLimit when it leaves
// room for a tile's padding, the "_long" ones otherwise.
AttentionVariant attention_variant(DType dtype, int head_dim, int64_t largest_index = 0);

// Compile only (CLI, CI, AOT; no GPU needed): every module an attention program needs for one
// variant, forward and backward, as kernel-cache requests.
std::vector<AttentionKernelSource> attention_kernel_sources(const AttentionProgram& program,
                                                            const AttentionVariant& variant);
KernelSpec attention_kernel_spec(const AttentionKernelSource& source,
                                 const std::string& program_name);

}  // namespace tilejit
