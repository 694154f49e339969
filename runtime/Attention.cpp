#include "runtime/Attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "compiler/codegen/PositionRange.h"
#include "runtime/AttentionChecks.h"
#include "runtime/AttentionSchedule.h"
#include "runtime/AttentionTma.h"
#include "runtime/DenseMask.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/Launch.h"
#include "runtime/Module.h"
#include "runtime/TensorMapEncode.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cpu/RowHooks.h"

namespace tilejit {

using namespace attention_checks;  // AttentionChecks.h

namespace {

using Where = TensorView::Where;

// ---------------------------------------------------------------------------------------------
// Where the GPU work runs.

// The context to run in (the current one, else device 0's primary) and its architecture.
CUcontext gpu_context(std::string& arch) {
  Driver* driver = Driver::get();
  TILEJIT_USER_CHECK(driver, "attention: device tensors but no GPU: {}",
                     Driver::unavailable_reason());
  driver->ensure_context();
  arch = device_arch(0);
  return driver->current_context();
}

// ---------------------------------------------------------------------------------------------
// Kernels: generated, compiled and loaded once per (program, variant, module, arch).

struct PreparedModule {
  std::map<std::string, std::string, std::less<>> entries;
  ArgLayout layout;
  std::shared_ptr<const CompiledKernel> kernel;
};

std::shared_ptr<const PreparedModule> prepare(const AttentionProgram& program,
                                              const std::string& program_key,
                                              const AttentionVariant& variant,
                                              AttentionModule module, const std::string& arch) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const PreparedModule>> memo;
  const std::string key = fmt::format("{}/{}/{}/{}", program_key, variant_suffix(variant),
                                      attention_module_name(module), arch);
  {
    std::lock_guard lock(mu);
    if (auto it = memo.find(key); it != memo.end()) return it->second;
  }
  LoweredAttention lowered = lower(program);
  AttentionKernelSource source =
      generate_attention_module(lowered.program, lowered.score_grad, module, variant);
  auto prepared = std::make_shared<PreparedModule>();
  prepared->entries = source.entries;
  prepared->layout = source.cuda.layout;
  prepared->kernel = KernelCache::global().get(attention_kernel_spec(source, program.name), arch);
  std::lock_guard lock(mu);
  if (memo.size() >= 1024) memo.clear();  // a bound, not an LRU: programs are few in practice
  memo.emplace(key, prepared);
  return prepared;
}

// A loaded kernel, its dynamic shared memory allowed, ready to launch.
struct Kernel {
  CUfunction function = nullptr;
  AttentionLaunchShape shape;
};

Kernel load(const PreparedModule& prepared, std::string_view kernel, int head_dim) {
  std::shared_ptr<LoadedModule> module = load_module(*prepared.kernel);
  auto it = prepared.entries.find(kernel);
  TILEJIT_INTERNAL_CHECK(it != prepared.entries.end(), "attention module lacks {}", kernel);
  Kernel k{module->function(it->second), attention_launch_shape(kernel, head_dim)};
  if (k.shape.smem_bytes > 48 * 1024)
    module->set_max_dynamic_shared_memory(it->second, k.shape.smem_bytes);
  return k;
}

// ---------------------------------------------------------------------------------------------
// Device state: block-mask copies (by content, shared by every stream) and per-stream scratch.
// One mutex covers fetching them and enqueueing the launches that use them, so a buffer is only
// freed after synchronising the work that may still read it.

// Host mirrors of kernels_templates/attention_fwd.cuh, attention_bwd.cuh, block_mask.cuh.
struct AttnTensorArg {
  void* ptr;
  long long stride_b, stride_h, stride_s;
};
struct AttnShapeArg {
  int batch, heads_q, heads_kv, seq_q, seq_kv;
  float scale;
};
struct BlockMaskArg {
  const void *offsets, *runs, *t_offsets, *t_runs;
  int batch, heads, q_tiles, kv_tiles, block_q, block_kv;
};
struct FwdParams {
  AttnTensorArg q, k, v, out;
  float* lse;
  int* work;
  AttnShapeArg shape;
  BlockMaskArg mask;
  int q_band;
};
struct BwdParams {
  AttnTensorArg q, k, v, out, d_out, dq, dk, dv;
  const float* lse;
  float* delta;
  float* lse_log2;
  float* dq_accum;
  AttnShapeArg shape;
  BlockMaskArg mask;
  int* work;
  int key_band;
  int items;
};
struct TmaMapsArg {  // tjk::AttnFwdTmaMaps
  CUtensorMap q, k, v, out;
};
struct BwdTmaMapsArg {  // tjk::AttnBwdTmaMaps
  CUtensorMap q, k, v, d_out, dq_accum;
};
static_assert(sizeof(FwdParams) == kAttnFwdParamsBytes);
static_assert(sizeof(TmaMapsArg) == kAttnFwdTmaMapsBytes);
static_assert(sizeof(BwdTmaMapsArg) == kAttnBwdTmaMapsBytes);
static_assert(sizeof(BwdParams) == kAttnBwdParamsBytes);

// A block mask's device copy, uploaded on the stream of its first use; `ready` marks the end of
// the upload, which launches on other streams wait for (on the device, not the host).
struct DeviceMask {
  DeviceBuffer buffer;
  BlockMaskArg view{};
  // The Hopper forward's schedule (attention_fwd_sm90.cuh's FwdWorkItem): where the work items
  // never grow in the order it numbers them (q tiles from the last), fixed shares per CTA, which
  // keep the CTAs reading the same K and V in step; otherwise, as with documents, one item at a
  // time from a counter (document forward +9-10% on the H200; on causal masks the two were level,
  // bench/NOTES.md, sixteenth session).
  bool fixed_shares = false;
  CUstream uploaded_on = nullptr;
  CUevent ready = nullptr;
  DeviceMask() = default;
  DeviceMask(const DeviceMask&) = delete;
  DeviceMask& operator=(const DeviceMask&) = delete;
  ~DeviceMask() {
    if (ready) Driver::get()->event_destroy(ready);
  }
};

struct DeviceState {
  std::mutex mutex;
  std::map<std::pair<CUcontext, std::string>, std::unique_ptr<DeviceMask>> masks;
  std::map<std::pair<CUcontext, CUstream>, DeviceBuffer> scratch;
  // The Hopper kernels' work-item counters per stream (launches on one stream run in turn).
  std::map<std::pair<CUcontext, CUstream>, DeviceBuffer> work_counters;
};

DeviceState& device_state() {
  static auto* s = new DeviceState();  // never destroyed: freeing at exit races the driver
  return *s;
}

template <class T>
void append_bytes(std::string& out, const std::vector<T>& v) {
  size_t n = v.size() * sizeof(T);
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(reinterpret_cast<const char*>(v.data()), n);
}

size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }

// The device copy of `mask` for work on `stream` (state.mutex held). The first use uploads it
// on `stream` (the host bytes are staged before the copy call returns); a use on another stream
// makes that stream wait for the upload.
const DeviceMask& device_mask(DeviceState& state, CUcontext context, CUstream stream,
                              const BlockMask& mask) {
  Driver* driver = Driver::get();
  const BlockMaskShape& s = mask.shape();
  std::string key(reinterpret_cast<const char*>(&s), sizeof s);
  append_bytes(key, mask.offsets());
  append_bytes(key, mask.runs());
  append_bytes(key, mask.t_offsets());
  append_bytes(key, mask.t_runs());
  auto& slot = state.masks[{context, key}];
  if (slot) {
    if (slot->uploaded_on != stream) driver->stream_wait_event(stream, slot->ready);
    return *slot;
  }
  if (state.masks.size() > 64) {  // rare: forget the copies, after the work that reads them
    driver->context_synchronize();
    state.masks.clear();
    return device_mask(state, context, stream, mask);
  }
  size_t sizes[4] = {mask.offsets().size() * 4, mask.runs().size() * 8, mask.t_offsets().size() * 4,
                     mask.t_runs().size() * 8};
  const void* data[4] = {mask.offsets().data(), mask.runs().data(), mask.t_offsets().data(),
                         mask.t_runs().data()};
  std::vector<unsigned char> host;
  size_t at[4];
  for (int i = 0; i < 4; ++i) {
    at[i] = host.size();
    host.resize(align8(host.size() + sizes[i]));
    if (sizes[i]) std::memcpy(host.data() + at[i], data[i], sizes[i]);
  }
  auto dm = std::make_unique<DeviceMask>();
  dm->buffer = DeviceBuffer(std::max<size_t>(host.size(), 8));
  if (!host.empty())
    driver->memcpy_htod_async(reinterpret_cast<CUdeviceptr>(dm->buffer.data()), host.data(),
                              host.size(), stream);
  dm->uploaded_on = stream;
  dm->ready = driver->event_create(CU_EVENT_DISABLE_TIMING);
  driver->event_record(dm->ready, stream);
  auto base = static_cast<const unsigned char*>(dm->buffer.data());
  dm->view = {base + at[0], base + at[1],   base + at[2],    base + at[3], s.batch,
              s.heads,      mask.q_tiles(), mask.kv_tiles(), s.block_q,    s.block_kv};
  dm->fixed_shares = mask.tiles_rise_with_q();
  slot = std::move(dm);
  return *slot;
}

// At least `bytes` of scratch for `stream` (state.mutex held); grows after synchronising it.
float* scratch(DeviceState& state, CUcontext context, CUstream stream, size_t bytes) {
  DeviceBuffer& buf = state.scratch[{context, stream}];
  if (buf.bytes() < bytes) {
    if (buf.bytes() > 0) Driver::get()->stream_synchronize(stream);
    buf = DeviceBuffer(bytes);
  }
  return static_cast<float*>(buf.data());
}

// Two ints the Hopper kernels' CTAs take their work items from (the forward's where it uses a
// counter, the backward's always): zeroed on `stream` when made, and every launch leaves them
// zero (its last CTA resets them).
int* work_counters(DeviceState& state, CUcontext context, CUstream stream) {
  DeviceBuffer& buf = state.work_counters[{context, stream}];
  if (buf.bytes() == 0) {
    static const int kZeros[2] = {0, 0};
    buf = DeviceBuffer(sizeof kZeros);
    Driver::get()->memcpy_htod_async(buf.ptr(), kZeros, sizeof kZeros, stream);  // on `stream`
  }
  return static_cast<int*>(buf.data());
}

// SMs of device 0, as the kernels' arch (gpu_context); read once, not on every call.
int64_t sm_count() {
  static const int64_t sms = Driver::get()->attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
  return sms;
}

AttnTensorArg tensor_arg(const TensorView& t) {
  return {t.data, t.strides[0], t.strides[1], t.strides[2]};
}

// An empty tensor (Skv = 0) gets no map: the kernel has no kv step to load then.
CUtensorMap tensor_map(const TensorView& t, unsigned box_rows = 64) {
  if (t.numel() == 0) return CUtensorMap{};
  const int64_t shape[4] = {t.shape[0], t.shape[1], t.shape[2], t.shape[3]};
  const int64_t strides[3] = {t.strides[0], t.strides[1], t.strides[2]};
  return encode_tensor_map(
      attention_tensor_map_args(t.data, shape, strides, t.dtype == DType::F16, box_rows));
}

unsigned blocks(int64_t items, int64_t per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

void launch_if(const Kernel& k, Dim3 grid, CUstream stream, void** params) {
  if (grid.x == 0 || grid.y == 0) return;
  launch(k.function, grid, Dim3{static_cast<unsigned>(k.shape.threads), 1, 1},
         static_cast<size_t>(k.shape.smem_bytes), stream, params);
}

std::string program_key(const AttentionProgram& program) { return program_hash(program); }

}  // namespace

// The largest of the batch, query-head and sequence extents (picks the kernel variant).
int64_t largest_index(const Problem& p) {
  return std::max({int64_t{p.batch}, int64_t{p.heads_q}, int64_t{p.seq_q}, int64_t{p.seq_kv}});
}

AttentionModule attention_forward_module(AttentionPath path, const std::string& arch) {
  if (path == AttentionPath::Auto) {
    const char* env = std::getenv("TILEJIT_ATTENTION_PATH");
    const std::string_view chosen = env ? env : "";
    if (chosen.empty())
      return arch == "sm_90a" ? AttentionModule::ForwardSm90 : AttentionModule::Forward;
    TILEJIT_USER_CHECK(chosen == "portable" || chosen == "sm90",
                       "TILEJIT_ATTENTION_PATH must be 'portable' or 'sm90', got '{}'", chosen);
    path = chosen == "sm90" ? AttentionPath::Sm90 : AttentionPath::Portable;
  }
  if (path == AttentionPath::Portable) return AttentionModule::Forward;
  TILEJIT_USER_CHECK(arch == "sm_90a",
                     "attention: the sm90 forward (wgmma + TMA) runs on sm_90a devices (compute "
                     "capability 9.0), not on this {} device",
                     arch);
  return AttentionModule::ForwardSm90;
}

AttentionModule attention_backward_module(AttentionPath path, const std::string& arch,
                                          bool deterministic) {
  if (path == AttentionPath::Auto) {
    const char* env = std::getenv("TILEJIT_ATTENTION_BWD_PATH");
    const std::string_view chosen = env ? env : "";
    TILEJIT_USER_CHECK(chosen.empty() || chosen == "portable" || chosen == "sm90",
                       "TILEJIT_ATTENTION_BWD_PATH must be 'portable' or 'sm90', got '{}'", chosen);
    if (chosen.empty())
      path = arch == "sm_90a" ? AttentionPath::Sm90 : AttentionPath::Portable;
    else
      path = chosen == "sm90" ? AttentionPath::Sm90 : AttentionPath::Portable;
  }
  if (path == AttentionPath::Portable)
    return deterministic ? AttentionModule::BackwardDeterministic : AttentionModule::Backward;
  TILEJIT_USER_CHECK(arch == "sm_90a",
                     "attention: the sm90 backward (wgmma + TMA) runs on sm_90a devices (compute "
                     "capability 9.0), not on this {} device",
                     arch);
  return deterministic ? AttentionModule::BackwardSm90Deterministic : AttentionModule::BackwardSm90;
}

AttentionVariant attention_variant(DType dtype, int head_dim, int64_t largest_index) {
  TILEJIT_USER_CHECK(
      (dtype == DType::BF16 || dtype == DType::F16) && (head_dim == 64 || head_dim == 128),
      "attention kernels support dtypes bf16 and f16 with head dims 64 and 128, "
      "not {} with head dim {}",
      dtype_name(dtype), head_dim);
  // Kernels evaluate hooks (parts) up to a tile past the last position: 256 covers both paths.
  const bool long_positions = largest_index > kPositionLimit - 256;
  return {dtype == DType::F16 ? ElemType::F16 : ElemType::BF16, head_dim, long_positions};
}

std::vector<AttentionKernelSource> attention_kernel_sources(const AttentionProgram& program,
                                                            const AttentionVariant& variant) {
  check_attention_variant(variant);
  LoweredAttention lowered = lower(program);
  std::vector<AttentionKernelSource> out;
  for (AttentionModule m : attention_modules())
    out.push_back(generate_attention_module(lowered.program, lowered.score_grad, m, variant));
  return out;
}

KernelSpec attention_kernel_spec(const AttentionKernelSource& source,
                                 const std::string& program_name) {
  KernelSpec spec = kernel_spec(source.cuda, program_name);
  spec.entry_points.clear();
  for (const auto& [kernel, entry] : source.entries) spec.entry_points.push_back(entry);
  spec.variant = source.variant;
  return spec;
}

void attention_forward(const AttentionProgram& program, const TensorView& q_in,
                       const TensorView& k_in, const TensorView& v_in, const Bindings& bindings,
                       const BlockMask& block_mask, const AttentionOptions& options,
                       CUstream stream, const TensorView& out_in, const TensorView& lse_in) {
  TensorView q = named(q_in, "q"), k = named(k_in, "k"), v = named(v_in, "v");
  TensorView out = named(out_in, "out"), lse = named(lse_in, "lse");
  Problem p = check_inputs(q, k, v, options);
  check_like(out, {p.batch, p.heads_q, p.seq_q, p.dim}, q.dtype, p, "q");
  check_lse(lse, p);
  check_block_mask(block_mask, p);
  check_bindings(program, bindings, p.where);

  if (p.where == Where::Host) {
    LoweredAttention lowered = lower(program);
    auto hooks = make_row_hooks(lowered, bindings);
    cpu_attention_forward(*hooks, block_mask, {q, k, v, out, lse, p.scale});
    return;
  }
  check_gpu_layout(out);
  std::string arch;
  CUcontext context = gpu_context(arch);
  check_device_pointers({&q, &k, &v, &out, &lse});
  AttentionVariant variant = attention_variant(q.dtype, p.dim, largest_index(p));
  const AttentionModule module = attention_forward_module(options.forward_path, arch);
  const bool sm90 = module == AttentionModule::ForwardSm90;
  if (sm90)
    for (const TensorView* t : {&q, &k, &v, &out}) check_tma_layout(*t, "forward");
  auto fwd = prepare(program, program_key(program), variant, module, arch);
  Kernel kernel = load(*fwd, sm90 ? "attention_fwd_sm90" : "attention_fwd", p.dim);
  if (int64_t{p.batch} * p.heads_q * p.seq_q == 0) return;
  std::vector<unsigned char> args = pack_args(fwd->layout, bindings);
  TmaMapsArg maps{};
  if (sm90) maps = {tensor_map(q), tensor_map(k), tensor_map(v), tensor_map(out, 16)};

  DeviceState& state = device_state();
  std::lock_guard lock(state.mutex);
  const DeviceMask& mask = device_mask(state, context, stream, block_mask);
  const bool counter = sm90 && attention_schedule::forward_uses_counter(mask.fixed_shares);
  // Persistent (sm90): at most one CTA per SM, walking the (b, h, q tile) items longest first for
  // triangular masks, in bands of q tiles, in fixed shares or one at a time
  // (DeviceMask::fixed_shares).
  const int64_t heads = int64_t{p.batch} * p.heads_q, items = heads * block_mask.q_tiles();
  const int64_t ctas = std::min(items, sm_count());
  FwdParams params{tensor_arg(q),
                   tensor_arg(k),
                   tensor_arg(v),
                   tensor_arg(out),
                   static_cast<float*>(lse.data),
                   counter ? work_counters(state, context, stream) : nullptr,
                   {p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.scale},
                   mask.view,
                   attention_schedule::forward_band(heads, block_mask.q_tiles(), ctas)};
  void* kernel_params[] = {&params, args.data(), &maps};  // the portable kernel takes two
  if (sm90) {
    launch_if(kernel, {static_cast<unsigned>(ctas), 1, 1}, stream, kernel_params);
    return;
  }
  launch_if(
      kernel,
      {static_cast<unsigned>(p.batch * p.heads_q), static_cast<unsigned>(block_mask.q_tiles()), 1},
      stream, kernel_params);
}

void attention_backward(const AttentionProgram& program, const TensorView& q_in,
                        const TensorView& k_in, const TensorView& v_in, const TensorView& out_in,
                        const TensorView& lse_in, const TensorView& d_out_in,
                        const Bindings& bindings, const BlockMask& block_mask,
                        const AttentionOptions& options, CUstream stream, const TensorView& dq_in,
                        const TensorView& dk_in, const TensorView& dv_in) {
  TensorView q = named(q_in, "q"), k = named(k_in, "k"), v = named(v_in, "v");
  TensorView out = named(out_in, "out"), lse = named(lse_in, "lse");
  TensorView d_out = named(d_out_in, "d_out"), dq = named(dq_in, "dq");
  TensorView dk = named(dk_in, "dk"), dv = named(dv_in, "dv");
  Problem p = check_inputs(q, k, v, options);
  const std::vector<int64_t> q_shape{p.batch, p.heads_q, p.seq_q, p.dim};
  const std::vector<int64_t> kv_shape{p.batch, p.heads_kv, p.seq_kv, p.dim};
  check_like(out, q_shape, q.dtype, p, "q");
  check_like(d_out, q_shape, q.dtype, p, "q");
  check_like(dq, q_shape, q.dtype, p, "q");
  check_like(dk, kv_shape, q.dtype, p, "k");
  check_like(dv, kv_shape, q.dtype, p, "k");
  check_lse(lse, p);
  check_block_mask(block_mask, p);
  check_bindings(program, bindings, p.where);

  if (p.where == Where::Host) {
    LoweredAttention lowered = lower(program);
    auto hooks = make_row_hooks(lowered, bindings);
    cpu_attention_backward(*hooks, block_mask, {q, k, v, out, lse, d_out, dq, dk, dv, p.scale});
    return;
  }
  for (const TensorView* t : {&out, &d_out, &dq, &dk, &dv}) check_gpu_layout(*t);
  std::string arch;
  CUcontext context = gpu_context(arch);
  check_device_pointers({&q, &k, &v, &out, &lse, &d_out, &dq, &dk, &dv});
  AttentionVariant variant = attention_variant(q.dtype, p.dim, largest_index(p));
  const std::string key = program_key(program);
  const bool det = options.deterministic;
  const AttentionModule module = attention_backward_module(options.backward_path, arch, det);
  const bool sm90 = module == AttentionModule::BackwardSm90 ||
                    module == AttentionModule::BackwardSm90Deterministic;
  if (sm90)
    for (const TensorView* t : {&q, &k, &v, &d_out}) check_tma_layout(*t, "backward");
  auto rows = prepare(program, key, variant, AttentionModule::BackwardRows, arch);
  auto main = prepare(program, key, variant, module, arch);
  Kernel preprocess = load(*rows, "attention_bwd_preprocess", p.dim);
  Kernel convert = load(*rows, "attention_bwd_dq_convert", p.dim);
  const char* main_kernel = sm90 ? (det ? "attention_bwd_sm90_det" : "attention_bwd_sm90")
                                 : (det ? "attention_bwd_det" : "attention_bwd");
  Kernel bwd = load(*main, main_kernel, p.dim);
  Kernel dq_kernel = det ? load(*main, "attention_bwd_dq", p.dim) : Kernel{};
  const int64_t n_rows = int64_t{p.batch} * p.heads_q * p.seq_q;
  if (n_rows == 0 && int64_t{p.batch} * p.heads_kv * p.seq_kv == 0) return;
  std::vector<unsigned char> args = pack_args(main->layout, bindings);
  BwdTmaMapsArg maps{};
  if (sm90) maps = {tensor_map(q), tensor_map(k), tensor_map(v), tensor_map(d_out), {}};

  DeviceState& state = device_state();
  std::lock_guard lock(state.mutex);
  // Scratch: delta [rows], the log2-domain lse [rows], then (atomic mode) the fp32 dQ
  // accumulator [rows, D]. The accumulator is read as float4: keep it 256-byte aligned like the
  // allocation itself.
  const size_t row_bytes = (static_cast<size_t>(n_rows) * 4 + 255) & ~size_t{255};
  const size_t accum_bytes = det ? 0 : static_cast<size_t>(n_rows) * p.dim * 4;
  float* work = scratch(state, context, stream, std::max<size_t>(2 * row_bytes + accum_bytes, 16));
  BwdParams params{tensor_arg(q),
                   tensor_arg(k),
                   tensor_arg(v),
                   tensor_arg(out),
                   tensor_arg(d_out),
                   tensor_arg(dq),
                   tensor_arg(dk),
                   tensor_arg(dv),
                   static_cast<const float*>(lse.data),
                   work,
                   work + row_bytes / 4,
                   det ? nullptr : work + 2 * row_bytes / 4,
                   {p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_kv, p.scale},
                   device_mask(state, context, stream, block_mask).view,
                   sm90 ? work_counters(state, context, stream) : nullptr,
                   /*key_band=*/1,
                   /*items=*/0};
  if (sm90 && !det && n_rows > 0) {  // the dQ blocks are added into the accumulator by TMA
    const int64_t shape[4] = {p.batch, p.heads_q, p.seq_q, p.dim};
    maps.dq_accum = encode_tensor_map(dq_accum_tensor_map_args(params.dq_accum, shape));
  }
  void* rows_params[] = {&params};
  void* main_params[] = {&params, args.data(), &maps};  // the portable kernels take two
  launch_if(preprocess, {blocks(n_rows, 8), 1, 1}, stream, rows_params);
  if (sm90) {
    // Persistent: a CTA per SM takes the work items from the counters, one per key block
    // (kAttentionBwdSm90BlockKV keys, two block-mask kv tiles) of each (b, hk), numbered in bands
    // of key blocks (attention_bwd_sm90_ring.cuh, BwdSm90Item).
    const int64_t heads = int64_t{p.batch} * p.heads_kv;
    const int kv_per_cta = kAttentionBwdSm90BlockKV / kAttentionBlockKV;
    const int64_t key_blocks = (block_mask.kv_tiles() + kv_per_cta - 1) / kv_per_cta;
    params.key_band = attention_schedule::backward_band(key_blocks);
    const int64_t ctas = attention_schedule::backward_grid(heads * key_blocks, sm_count());
    params.items = static_cast<int>(heads * key_blocks);
    launch_if(bwd, {static_cast<unsigned>(ctas), 1, 1}, stream, main_params);
  } else {
    launch_if(bwd,
              {static_cast<unsigned>(p.batch * p.heads_kv),
               static_cast<unsigned>(block_mask.kv_tiles()), 1},
              stream, main_params);
  }
  if (det)
    launch_if(dq_kernel,
              {static_cast<unsigned>(p.batch * p.heads_q),
               static_cast<unsigned>(block_mask.q_tiles()), 1},
              stream, main_params);
  else
    launch_if(convert, {blocks(n_rows * (p.dim / 8), 256), 1, 1}, stream, rows_params);
}

}  // namespace tilejit
