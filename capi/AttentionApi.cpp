// The C ABI's block masks and attention forward / backward (runtime/MaskAnalysis.h,
// runtime/MaskAnalysisGpu.h, runtime/Attention.h). Placement follows the tensors: the runtime
// runs host tensors on the CPU executor and device tensors on the GPU kernels.
#include <cuda.h>

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ErrorBoundary.h"
#include "Handles.h"
#include "TensorDesc.h"
#include "runtime/Attention.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/MaskAnalysis.h"
#include "runtime/MaskAnalysisGpu.h"

using namespace tilejit;
using namespace tilejit::capi;

namespace {

using Where = TensorView::Where;

CUstream cu_stream(void* stream) { return static_cast<CUstream>(stream); }

BlockMaskShape mask_shape_of(const tj_block_mask_shape& s) {
  if (s.batch < 1 || s.heads < 1)
    fail(TJ_ERR_INVALID_ARGUMENT, "shape: batch ({}) and heads ({}) must be at least 1", s.batch,
         s.heads);
  if (s.seq_q < 0 || s.seq_kv < 0)
    fail(TJ_ERR_INVALID_ARGUMENT, "shape: seq_q ({}) and seq_kv ({}) must not be negative", s.seq_q,
         s.seq_kv);
  if (s.block_q < 0 || s.block_kv < 0)
    fail(TJ_ERR_INVALID_ARGUMENT,
         "shape: block_q ({}) and block_kv ({}) must be positive, or 0 for the default", s.block_q,
         s.block_kv);
  BlockMaskShape shape{.batch = s.batch, .heads = s.heads, .seq_q = s.seq_q, .seq_kv = s.seq_kv};
  if (s.block_q > 0) shape.block_q = s.block_q;
  if (s.block_kv > 0) shape.block_kv = s.block_kv;
  return shape;
}

// Mask analysis where the program's buffers are: on the GPU for a device call or bindings that
// hold device buffers (when the program has buffers at all), else on the CPU.
BlockMask analyse(const LoweredAttention& lowered, const tj_bindings* bindings,
                  const BlockMaskShape& shape, bool device_call, CUstream stream) {
  const Bindings& bind = bindings_of(bindings);
  bool on_gpu = device_call;
  if (!on_gpu && bindings && !bindings->device_of.empty()) {
    const auto& [name, ordinal] = *bindings->device_of.begin();
    prepare_device(ordinal, fmt::format("buffer '{}'", name));
    on_gpu = true;
  }
  if (on_gpu && !lowered.program.buffers.empty())
    return analyse_block_mask_gpu(lowered, bind, shape, stream);
  return analyse_block_mask(lowered, bind, shape);
}

std::optional<int32_t> as_int32(int64_t v) {
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int32_t>(v);
}

// The block mask a call without one uses: built for the tensors' B, Hq, Sq, Skv with the GPU
// kernels' tiles. Tensors the runtime will reject get an empty mask (never reached).
BlockMask mask_for_call(const tj_program* program, const tj_bindings* bindings, const TensorView& q,
                        const TensorView& k, CUstream stream) {
  if (q.rank() != 4 || k.rank() != 4) return {};
  auto batch = as_int32(q.shape[0]), heads = as_int32(q.shape[1]), seq_q = as_int32(q.shape[2]),
       seq_kv = as_int32(k.shape[2]);
  if (!batch || !heads || !seq_q || !seq_kv || *batch < 1 || *heads < 1) return {};
  BlockMaskShape shape{.batch = *batch, .heads = *heads, .seq_q = *seq_q, .seq_kv = *seq_kv};
  return analyse(lowered_attention(program), bindings, shape, q.where == Where::Device, stream);
}

AttentionOptions options_of(const tj_attention_options* o) {
  AttentionOptions options;
  if (!o) return options;
  if (o->has_scale) options.scale = o->scale;
  options.deterministic = o->deterministic != 0;
  return options;
}

// What the GPU kernels do not support (dtype, head dim) is TJ_ERR_UNSUPPORTED, told apart here
// from a malformed tensor, which the runtime reports afterwards.
void check_supported(const TensorView& q) {
  if (q.where != Where::Device || q.rank() != 4) return;
  auto dim = as_int32(q.shape[3]);
  if (!dim) return;
  retag_user_errors(TJ_ERR_UNSUPPORTED, [&] { attention_variant(q.dtype, *dim); });
}

}  // namespace

extern "C" {

// ---- block masks ---------------------------------------------------------------------------

tj_status tj_block_mask_create(const tj_program* program, const tj_bindings* bindings,
                               const tj_block_mask_shape* shape, void* stream,
                               tj_block_mask** out) {
  if (out) *out = nullptr;
  return boundary("tj_block_mask_create", program_name(program), [&] {
    tj_block_mask*& result = out_param(out, "out");
    const LoweredAttention& lowered = lowered_attention(program);
    if (!shape) fail(TJ_ERR_INVALID_ARGUMENT, "the shape is NULL");
    auto handle = std::make_unique<tj_block_mask>();
    handle->mask = analyse(lowered, bindings, mask_shape_of(*shape), false, cu_stream(stream));
    result = handle.release();
  });
}

void tj_block_mask_destroy(tj_block_mask* mask) { delete mask; }

tj_status tj_block_mask_counts(const tj_block_mask* mask, int64_t* full, int64_t* partial,
                               int64_t* empty) {
  return boundary("tj_block_mask_counts", [&] {
    if (!mask) fail(TJ_ERR_INVALID_ARGUMENT, "the block mask is NULL");
    BlockMask::Counts c = mask->mask.counts();
    if (full) *full = c.full;
    if (partial) *partial = c.partial;
    if (empty) *empty = c.empty;
  });
}

tj_status tj_block_mask_get_shape(const tj_block_mask* mask, tj_block_mask_shape* shape) {
  return boundary("tj_block_mask_get_shape", [&] {
    if (!mask) fail(TJ_ERR_INVALID_ARGUMENT, "the block mask is NULL");
    const BlockMaskShape& s = mask->mask.shape();
    out_param(shape, "shape") = {s.batch, s.heads, s.seq_q, s.seq_kv, s.block_q, s.block_kv};
  });
}

// ---- attention -----------------------------------------------------------------------------

tj_status tj_attention_forward(const tj_program* program, const tj_tensor* q, const tj_tensor* k,
                               const tj_tensor* v, const tj_bindings* bindings,
                               const tj_block_mask* block_mask, const tj_attention_options* options,
                               const tj_tensor* out, const tj_tensor* lse, void* stream) {
  return boundary("tj_attention_forward", program_name(program), [&] {
    const AttentionProgram& prog = attention_program(program);
    TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v");
    TensorView out_v = to_view(out, "out");
    check_supported(qv);
    prepare_placement({"q", q}, {{"k", k}, {"v", v}, {"out", out}, {"lse", lse}});

    // Without `lse`, the runtime still writes one: into scratch placed like q.
    std::vector<float> host_lse;
    DeviceBuffer device_lse;
    TensorView lse_v;
    if (lse) {
      lse_v = to_view(lse, "lse");
    } else if (qv.rank() == 4) {
      std::vector<int64_t> shape{qv.shape[0], qv.shape[1], qv.shape[2]};
      const auto n = static_cast<size_t>(shape[0] * shape[1] * shape[2]);
      void* data = nullptr;
      if (qv.where == Where::Host) {
        host_lse.resize(n);
        data = host_lse.data();
      } else {
        device_lse = DeviceBuffer(n * sizeof(float));
        data = device_lse.data();
      }
      lse_v = TensorView::contiguous(data, DType::F32, shape, qv.where, "lse");
    }

    BlockMask built;
    if (!block_mask) built = mask_for_call(program, bindings, qv, kv, cu_stream(stream));
    attention_forward(prog, qv, kv, vv, bindings_of(bindings),
                      block_mask ? block_mask->mask : built, options_of(options), cu_stream(stream),
                      out_v, lse_v);
    if (device_lse.bytes() > 0) Driver::get()->stream_synchronize(cu_stream(stream));
  });
}

tj_status tj_attention_backward(const tj_program* program, const tj_tensor* q, const tj_tensor* k,
                                const tj_tensor* v, const tj_tensor* out, const tj_tensor* lse,
                                const tj_tensor* d_out, const tj_bindings* bindings,
                                const tj_block_mask* block_mask,
                                const tj_attention_options* options, const tj_tensor* dq,
                                const tj_tensor* dk, const tj_tensor* dv, void* stream) {
  return boundary("tj_attention_backward", program_name(program), [&] {
    const AttentionProgram& prog = attention_program(program);
    TensorView qv = to_view(q, "q"), kv = to_view(k, "k"), vv = to_view(v, "v");
    TensorView out_v = to_view(out, "out"), lse_v = to_view(lse, "lse");
    TensorView d_out_v = to_view(d_out, "d_out");
    TensorView dq_v = to_view(dq, "dq"), dk_v = to_view(dk, "dk"), dv_v = to_view(dv, "dv");
    check_supported(qv);
    prepare_placement({"q", q}, {{"k", k},
                                 {"v", v},
                                 {"out", out},
                                 {"lse", lse},
                                 {"d_out", d_out},
                                 {"dq", dq},
                                 {"dk", dk},
                                 {"dv", dv}});
    BlockMask built;
    if (!block_mask) built = mask_for_call(program, bindings, qv, kv, cu_stream(stream));
    attention_backward(prog, qv, kv, vv, out_v, lse_v, d_out_v, bindings_of(bindings),
                       block_mask ? block_mask->mask : built, options_of(options),
                       cu_stream(stream), dq_v, dk_v, dv_v);
  });
}

}  // extern "C"
