// Attention forward and backward on the CPU, with the algorithms and semantics of the GPU
// kernels (compiler/IR.h "Attention"): tiles from the block mask, online softmax in fp32, only
// listed kv tiles visited, the mask evaluated only on partial tiles, GQA, any strides (last
// dimension contiguous), lse in natural log, all-masked rows giving O = 0 and lse = -inf.
// Work is spread over a thread pool by (batch, head, tile); every output element is written by
// one task in a fixed order, so results are deterministic run to run.
#pragma once

#include "runtime/BlockMask.h"
#include "runtime/TensorView.h"
#include "runtime/cpu/RowHooks.h"
#include "runtime/cpu/ThreadPool.h"

namespace tilejit {

// Host tensors: q, out [B, Hq, Sq, D]; k, v [B, Hkv, Skv, D]; lse [B, Hq, Sq] f32. q, k, v and
// out are f32, bf16 or f16 (each its own); Hq a multiple of Hkv.
struct CpuAttentionForwardArgs {
  TensorView q, k, v;
  TensorView out, lse;
  float scale = 0;  // 0: 1 / sqrt(D)
};

// dq like q, dk and dv like k (f32, bf16 or f16); out and lse from the forward; d_out like out.
struct CpuAttentionBackwardArgs {
  TensorView q, k, v, out, lse, d_out;
  TensorView d_q, d_k, d_v;
  float scale = 0;
};

// The mask's sequence lengths must match the tensors'; its batch and heads are 1 (broadcast)
// or the tensors' B and Hq. Bad tensors are UserErrors naming the tensor.
void cpu_attention_forward(const AttentionRowHooks& hooks, const BlockMask& mask,
                           const CpuAttentionForwardArgs& args,
                           ThreadPool& pool = ThreadPool::shared());
void cpu_attention_backward(const AttentionRowHooks& hooks, const BlockMask& mask,
                            const CpuAttentionBackwardArgs& args,
                            ThreadPool& pool = ThreadPool::shared());

}  // namespace tilejit
