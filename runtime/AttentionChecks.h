// The checks of the attention API (runtime/Attention.h): shapes, dtypes, strides and alignment
// of q, k, v, outputs and lse, and the block mask against them, each a UserError naming the
// tensor (views without a name get the role they play). Private to Attention.cpp.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "runtime/Attention.h"
#include "runtime/BlockMask.h"
#include "runtime/TensorView.h"

namespace tilejit::attention_checks {

// The problem the tensors describe, checked.
struct Problem {
  int batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0, dim = 0;
  float scale = 0;
  TensorView::Where where = TensorView::Where::Device;
};

// `t`, named `role` when it has no name.
TensorView named(const TensorView& t, const char* role);
// Shape [B, H, S, D] (or [B, H, S] for lse) equal to `want`, placed like q, dtype `dtype`.
void check_like(const TensorView& t, const std::vector<int64_t>& want, DType dtype,
                const Problem& p, const char* like);
// What the GPU kernels need of a [B, H, S, D] tensor: device memory, 16-byte aligned rows.
void check_gpu_layout(const TensorView& t);
// What the Hopper kernels need on top: TMA addresses memory through non-negative strides.
// `pass` is "forward" or "backward".
void check_tma_layout(const TensorView& t, std::string_view pass);
// Called last, once a context is current: catches host memory marked as device memory.
void check_device_pointers(std::initializer_list<const TensorView*> tensors);
void check_lse(const TensorView& lse, const Problem& p);
// q, k, v against each other and the path their placement selects; the scale.
Problem check_inputs(const TensorView& q, const TensorView& k, const TensorView& v,
                     const AttentionOptions& options);
void check_block_mask(const BlockMask& mask, const Problem& p);

}  // namespace tilejit::attention_checks
