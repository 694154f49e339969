#include "runtime/AttentionChecks.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>

#include "compiler/Error.h"
#include "runtime/Driver.h"

namespace tilejit::attention_checks {

using Where = TensorView::Where;

namespace {

int32_t as_int32(const TensorView& t, int axis, const char* what) {
  int64_t v = t.shape[axis];
  TILEJIT_USER_CHECK(v <= std::numeric_limits<int32_t>::max(),
                     "attention: {} = {} of '{}' does not fit in 32 bits", what, v, t.name);
  return static_cast<int32_t>(v);
}

}  // namespace

TensorView named(const TensorView& t, const char* role) {
  TensorView n = t;
  if (n.name.empty()) n.name = std::string(role);
  return n;
}

// Shape [B, H, S, D] (or [B, H, S] for lse) equal to `want`, placed like q, dtype `dtype`.
void check_like(const TensorView& t, const std::vector<int64_t>& want, DType dtype,
                const Problem& p, const char* like) {
  t.check_well_formed().check_rank(static_cast<int>(want.size()));
  TILEJIT_USER_CHECK(t.where == p.where, "attention: '{}' is in {} memory but q is in {} memory",
                     t.name, t.where == Where::Host ? "host" : "device",
                     p.where == Where::Host ? "host" : "device");
  static const char* kDims[] = {"B", "H", "S", "D"};
  for (size_t i = 0; i < want.size(); ++i)
    t.check_dim(static_cast<int>(i), want[i], fmt::format("{}, as in {}", kDims[i], like));
  TILEJIT_USER_CHECK(t.dtype == dtype, "attention: '{}' must have dtype {} (like {}), got {}",
                     t.name, dtype_name(dtype), like, dtype_name(t.dtype));
}

// What the GPU kernels need of a [B, H, S, D] tensor: device memory, 16-byte aligned rows.
void check_gpu_layout(const TensorView& t) {
  t.check_last_dim_contiguous();
  if (t.numel() == 0) return;
  t.check_alignment(16);
  for (int i = 0; i < 3; ++i)
    TILEJIT_USER_CHECK(t.shape[i] <= 1 || t.strides[i] % 8 == 0,
                       "attention: '{}': the stride of dimension {} must be a multiple of 8 "
                       "elements (16-byte aligned rows), got {} ({})",
                       t.name, i, t.strides[i], t.describe());
}

// What the Hopper kernels need on top: TMA addresses memory through non-negative strides.
// `pass` is "forward" or "backward".
void check_tma_layout(const TensorView& t, std::string_view pass) {
  const bool fwd = pass == "forward";
  for (int i = 0; i < 3; ++i)
    TILEJIT_USER_CHECK(t.shape[i] <= 1 || t.strides[i] >= 0,
                       "attention: '{}': the sm90 {} moves it with TMA, which needs "
                       "non-negative strides, got {} for dimension {} ({}); the portable {} "
                       "(AttentionPath::Portable, {}=portable) takes it",
                       t.name, pass, t.strides[i], i, t.describe(), pass,
                       fwd ? "TILEJIT_ATTENTION_PATH" : "TILEJIT_ATTENTION_BWD_PATH");
}

// Called last, once a context is current: catches host memory marked as device memory.
void check_device_pointers(std::initializer_list<const TensorView*> tensors) {
  Driver* driver = Driver::get();
  for (const TensorView* t : tensors)
    TILEJIT_USER_CHECK(t->numel() == 0 || driver->is_device_pointer(t->data),
                       "attention: '{}' is marked as device memory but {} is not a device pointer",
                       t->name, t->data);
}

void check_lse(const TensorView& lse, const Problem& p) {
  check_like(lse, {p.batch, p.heads_q, p.seq_q}, DType::F32, p, "q");
  TILEJIT_USER_CHECK(lse.numel() == 0 || lse.is_contiguous(),
                     "attention: '{}' must be contiguous ({})", lse.name, lse.describe());
  if (p.where == Where::Device && lse.numel() > 0) lse.check_alignment(4);
}

Problem check_inputs(const TensorView& q, const TensorView& k, const TensorView& v,
                     const AttentionOptions& options) {
  q.check_well_formed().check_rank(4);
  Problem p;
  p.where = q.where;
  p.batch = as_int32(q, 0, "B");
  p.heads_q = as_int32(q, 1, "Hq");
  p.seq_q = as_int32(q, 2, "Sq");
  p.dim = as_int32(q, 3, "D");
  k.check_well_formed().check_rank(4);
  p.heads_kv = as_int32(k, 1, "Hkv");
  p.seq_kv = as_int32(k, 2, "Skv");
  check_like(k, {p.batch, p.heads_kv, p.seq_kv, p.dim}, q.dtype, p, "q (B, D) and k");
  check_like(v, {p.batch, p.heads_kv, p.seq_kv, p.dim}, q.dtype, p, "k");
  TILEJIT_USER_CHECK(p.heads_kv > 0 ? p.heads_q % p.heads_kv == 0 : p.heads_q == 0,
                     "attention: '{}' has {} heads, not a multiple of the {} heads of '{}' (GQA "
                     "needs Hq % Hkv == 0)",
                     q.name, p.heads_q, p.heads_kv, k.name);
  TILEJIT_USER_CHECK(
      int64_t{p.batch} * std::max(p.heads_q, 1) <= std::numeric_limits<int32_t>::max(),
      "attention: '{}': B * Hq does not fit in 32 bits", q.name);
  if (p.where == Where::Device) {
    q.check_dtype({DType::BF16, DType::F16});
    TILEJIT_USER_CHECK(p.dim == 64 || p.dim == 128,
                       "attention: '{}' has head dim {}; the GPU kernels support head dims 64 and "
                       "128 (bf16 or f16)",
                       q.name, p.dim);
    for (const TensorView* t : {&q, &k, &v}) check_gpu_layout(*t);
  } else {
    q.check_dtype({DType::F32, DType::BF16, DType::F16}).check_last_dim_contiguous();
    k.check_last_dim_contiguous();
    v.check_last_dim_contiguous();
  }
  float scale =
      options.scale.value_or(p.dim > 0 ? 1.f / std::sqrt(static_cast<float>(p.dim)) : 1.f);
  TILEJIT_USER_CHECK(std::isfinite(scale), "attention: the scale must be finite, got {}", scale);
  p.scale = scale;
  return p;
}

void check_block_mask(const BlockMask& mask, const Problem& p) {
  const BlockMaskShape& s = mask.shape();
  TILEJIT_USER_CHECK(s.seq_q == p.seq_q && s.seq_kv == p.seq_kv,
                     "attention: 'block_mask' was built for seq_q {} x seq_kv {} but the tensors "
                     "have {} x {}",
                     s.seq_q, s.seq_kv, p.seq_q, p.seq_kv);
  TILEJIT_USER_CHECK(s.batch == 1 || s.batch == p.batch,
                     "attention: 'block_mask' has batch {}; expected 1 (broadcast) or B = {}",
                     s.batch, p.batch);
  TILEJIT_USER_CHECK(s.heads == 1 || s.heads == p.heads_q,
                     "attention: 'block_mask' has heads {}; expected 1 (broadcast) or Hq = {}",
                     s.heads, p.heads_q);
  if (p.where == Where::Device) {
    TILEJIT_USER_CHECK(s.block_q == kAttentionBlockQ && s.block_kv == kAttentionBlockKV,
                       "attention: 'block_mask' has tiles {} x {}; the GPU kernels need "
                       "block_q = {}, block_kv = {}",
                       s.block_q, s.block_kv, kAttentionBlockQ, kAttentionBlockKV);
    TILEJIT_USER_CHECK(mask.q_tiles() <= 65535 && mask.kv_tiles() <= 65535,
                       "attention: sequences of {} x {} exceed the kernels' grid (65535 tiles)",
                       p.seq_q, p.seq_kv);
  }
}

}  // namespace tilejit::attention_checks
