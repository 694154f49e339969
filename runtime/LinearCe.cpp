#include "runtime/LinearCe.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Validate.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/Launch.h"
#include "runtime/LinearCeChecks.h"
#include "runtime/LinearCeOrder.h"
#include "runtime/LinearCeParams.h"
#include "runtime/LinearCeState.h"
#include "runtime/LinearCeTma.h"
#include "runtime/LinearCeWorkspace.h"
#include "runtime/SideStream.h"
#include "runtime/TensorMapEncode.h"
#include "runtime/VocabOrderPlan.h"

namespace tilejit {

using namespace linear_ce;  // the kernels' launch parameters (LinearCeParams.h)

CeKlMaps linear_ce::kl_operand_maps(const CeLayout& layout, const CeRows& rows,
                                    const CeTeacher& teacher, bool f16, int cluster) {
  static_assert(kCeKlTmaRows == LinearCeWorkspace::kKlFwdRows &&
                    kCeKlRows == LinearCeWorkspace::kKlFwdRows && kCeWeightTmaRows == kTileIds,
                "the TMA boxes are the KL tiles");
  CeKlMaps maps{};
  maps.hidden = encode_tensor_map(ce_kl_hidden_tensor_map_args(rows.hidden, rows.n_kept, rows.dim,
                                                               rows.hidden_stride, f16, cluster));
  maps.teacher_hidden = encode_tensor_map(ce_kl_hidden_tensor_map_args(
      teacher.hidden, rows.n_kept, teacher.dim, teacher.hidden_stride, f16, cluster));
  for (int32_t s = 0; s < layout.num_segments; ++s) {
    const CeSegment& seg = layout.seg[s];
    const CeSegment& tseg = teacher.layout.seg[s];
    if (!seg.order)
      maps.weight[s] = encode_tensor_map(
          ce_weight_tensor_map_args(seg.weight, seg.size, rows.dim, seg.weight_stride, f16));
    if (!tseg.order)
      maps.teacher_weight[s] = encode_tensor_map(
          ce_weight_tensor_map_args(tseg.weight, tseg.size, teacher.dim, tseg.weight_stride, f16));
  }
  return maps;
}

int32_t linear_ce::shared_teacher_weights(const CeLayout& layout, const CeTeacher& teacher,
                                          int32_t dim) {
  int32_t bits = 0;
  for (int32_t s = 0; s < layout.num_segments; ++s) {
    const CeSegment& seg = layout.seg[s];
    const CeSegment& tseg = teacher.layout.seg[s];
    if (teacher.dim == dim && tseg.weight == seg.weight &&
        tseg.weight_stride == seg.weight_stride && tseg.order == seg.order &&
        tseg.size == seg.size && tseg.first_tile == seg.first_tile)
      bits |= 1 << s;
  }
  return bits;
}

CeClassifyParams linear_ce::classify_params(const LinearCeState& st, const LossProgram& P) {
  const LinearCeWorkspace& ws = st.ws;
  CeClassifyParams c;
  c.layout = st.layout;
  c.kept = st.kept();
  c.targets = st.targets32();
  c.lse = st.fwd<float>(ws.lse);
  c.n_kept = static_cast<int32_t>(st.n_kept);
  c.log_threshold = st.threshold > 0 ? std::log(st.threshold) : 0.f;
  const double alpha = P.kl ? P.kl->alpha : 0.0;
  c.ce_probs = alpha < 1 || P.z_loss > 0;
  c.tile_max_parts = P.kl ? 1 : 2;
  if (P.kl) {
    c.tempered_lse = st.fwd<float>(ws.tempered_lse);
    c.teacher_lse = st.fwd<float>(ws.teacher_lse);
    c.inv_temperature = st.teacher.inv_temperature;
  }
  return c;
}

static float effective_threshold(const LoweredLoss& l, const LinearCeOptions& o, DType dtype) {
  // The kernels drop the uniform smoothing term from skipped tiles unless they can add it
  // analytically, which they do only for an identity logit_mod.
  if (l.program.label_smoothing > 0 && !l.logit_is_identity) return 0.f;
  if (o.filter_threshold >= 0) return o.filter_threshold;
  return dtype == DType::F16 ? 1.f / 32768 : 1.f / 4096;
}

// LinearCeOptions::kl_forward_cluster, checked; 0 the default.
static int kl_forward_cluster(const LossProgram& prog, const LinearCeOptions& options) {
  const int c = options.kl_forward_cluster;
  TILEJIT_USER_CHECK(c == 0 || c == 1 || c == 2 || c == 4,
                     "program {}: kl_forward_cluster is {}: want 1, 2 or 4 CTAs (0: the default)",
                     prog.name, c);
  return c == 0 ? 1 : c;
}

static CeLayout device_layout(const LossProgram& prog, const std::vector<SegmentBinding>& segs) {
  CeLayout L;
  L.num_segments = static_cast<int32_t>(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    const Segment& s = prog.segments[i];
    CeSegment& c = L.seg[i];
    c.weight = segs[i].weight.data;
    c.bias = segs[i].bias ? segs[i].bias->data : nullptr;
    c.weight_stride = segs[i].weight.strides[0];
    c.begin = static_cast<int32_t>(s.begin);
    c.size = static_cast<int32_t>(s.size());
    c.first_tile = L.num_tiles;
    L.num_tiles += static_cast<int32_t>((s.size() + kTileIds - 1) / kTileIds);
    L.live_ids += c.size;
  }
  return L;
}

// Reads the first bad target back and explains it.
[[noreturn]] static void bad_target(const LossProgram& prog, const TensorView& targets,
                                    Driver* driver, int32_t row) {
  int64_t value = 0;
  const size_t bytes = targets.dtype == DType::I64 ? sizeof(int64_t) : sizeof(int32_t);
  if (bytes == sizeof(int64_t)) {
    driver->memcpy_dtoh(&value, targets.device_ptr() + row * targets.strides[0] * bytes, bytes);
  } else {
    int32_t v32 = 0;
    driver->memcpy_dtoh(&v32, targets.device_ptr() + row * targets.strides[0] * bytes, bytes);
    value = v32;
  }
  std::string ranges;
  for (const Segment& s : prog.segments)
    ranges += fmt::format("{}[{}, {})", ranges.empty() ? "" : ", ", s.begin, s.end);
  bool inside = value >= 0 && value < prog.vocab_end();
  user_error("program {}: '{}'[{}] = {} is {} (live ids: {}; ignore_index {})", prog.name,
             targets.name, row, value, inside ? "a dead id (in no segment)" : "out of range",
             ranges, prog.ignore_index);
}

// Copies of ordered segments' weights in position order, for one forward (LinearCe.h): a
// segment's rows of `cols` columns gathered through its order, into `given` (the caller's
// gradient buffer of those weights) when its rows are contiguous, else from the pool, back to it
// in stream order when released. A copy asked for twice (the same order, weights and columns:
// made early for the order a state was expected to hand out, or shared by a KL teacher) is made
// once.
class PositionOrderCopies {
 public:
  PositionOrderCopies(CUfunction gather, CUstream stream) : gather_(gather), stream_(stream) {}
  void* copy(const CeSegment& seg, int32_t cols, const std::optional<TensorView>* given) {
    for (const Made& m : made_)
      if (m.order == seg.order && m.weight == seg.weight && m.cols == cols) return m.copy;
    void* copy = nullptr;
    if (given && *given && (*given)->strides[0] == cols &&
        reinterpret_cast<uintptr_t>((*given)->data) % 16 == 0) {
      copy = (*given)->data;
    } else {
      pool_.push_back(DeviceBuffer::on_stream(size_t(seg.size) * size_t(cols) * 2, stream_));
      copy = pool_.back().data();
    }
    run(gather_, {static_cast<unsigned>(seg.size)}, {128}, 0, stream_,
        static_cast<const void*>(seg.weight), static_cast<long long>(seg.weight_stride), seg.order,
        cols, copy);
    made_.push_back({seg.order, seg.weight, cols, copy});
    return copy;
  }
  // Once the kernels reading the copies are queued: the pool's go back (the host waits for
  // nothing).
  void release() {
    made_.clear();
    pool_.clear();
  }

 private:
  struct Made {
    const int32_t* order;
    const void* weight;
    int32_t cols;
    void* copy;
  };
  CUfunction gather_;
  CUstream stream_;
  std::vector<DeviceBuffer> pool_;
  std::vector<Made> made_;
};

// ---- forward -------------------------------------------------------------------------------

// The segments whose weights the backward will read in position order from the gradient buffer
// the forward left its copy in (weights_read_by_position), and whose dC it will therefore move
// along the order's cycles at its end.
static uint32_t segments_read_by_position(const LinearCeState& st) {
  uint32_t mask = 0;
  for (size_t s = 0; s < st.d_weight_outputs.size(); ++s) {
    const std::optional<TensorView>& dw = st.d_weight_outputs[s];
    if (dw && weights_read_by_position(st.weights_in_grad_buffer.load() >> s & 1,
                                       dw->dtype != DType::F32, dw->strides[0], st.dim))
      mask |= 1u << s;
  }
  return mask;
}

// The forward's scratch allocation (LinearCeWorkspace: partials, tile maxima). Where the caller
// gave the forward a weight's gradient buffer, a backward follows in the same step: the scratch
// is then made as large as that backward's first pool allocations (its scratch, then its G buffer,
// at most its budget), so that the pool hands them the memory this forward frees rather than
// mapping more at the step's peak. (Allocations on one stream reuse what was freed there.)
static int64_t forward_scratch_bytes(const LinearCeState& st, bool hopper_products) {
  const LinearCeWorkspace& ws = st.ws;
  const int64_t own = std::max<int64_t>(ws.forward_end - ws.saved_end, 1);
  const uint32_t read_by_position = segments_read_by_position(st);
  const bool by_position = read_by_position != 0;
  bool given = false, stage_weights = false;
  for (size_t s = 0; s < st.d_weight_outputs.size(); ++s) {
    given |= st.d_weight_outputs[s].has_value();
    const bool here = read_by_position >> s & 1;
    stage_weights |= hopper_products && st.layout.seg[s].order && !here;
  }
  if (!given) return own;
  constexpr int64_t kSlack = int64_t{2} << 20;  // the pool's rounding of each allocation
  const int64_t all_pairs = int64_t(ws.row_tiles) * ws.num_tiles * CeBackwardPlan::kGradBlockBytes +
                            (stage_weights ? ws.num_tiles * staged_tile_bytes(st.dim) : 0);
  const int64_t grad =
      std::min(grad_buffer_budget(st.grad_buffer_bytes, by_position, stage_weights), all_pairs);
  return std::max(own, (ws.total_bytes - ws.forward_end) + grad + 2 * kSlack);
}

LinearCeForward linear_cross_entropy_forward(const LossProgram& prog, const TensorView& hidden_in,
                                             const Bindings& bind, const TensorView& targets_in,
                                             const LinearCeOptions& options, CUstream stream,
                                             const LinearCeOutputs& outputs_in,
                                             const LinearCeTeacher& teacher) {
  const TensorView hidden = named(hidden_in, "E"), targets = named(targets_in, "targets");
  LinearCeOutputs outputs = outputs_in;
  for (auto [view, name] :
       {std::pair{&outputs.loss, "loss"}, std::pair{&outputs.row_loss, "row_loss"},
        std::pair{&outputs.lse, "lse"}})
    if (*view) **view = named(**view, name);
  check_forward_inputs(prog, hidden, targets, outputs);
  check_teacher(prog, teacher);
  check_options(prog, options);
  auto st = std::make_shared<LinearCeState>();
  st->segments = bind_segments(prog, hidden, bind);
  std::optional<TensorView> teacher_hidden;
  if (prog.kl) {
    teacher_hidden = named(*teacher.hidden, "E_teacher");
    st->teacher_segments = bind_teacher(prog, hidden, *teacher_hidden, bind, st->segments);
  }
  Bindings captures = captured_only(prog, bind);
  check_bindings(prog.name, prog.buffers, prog.params, captures);
  st->dtype = hidden.dtype;
  st->n_rows = hidden.shape[0];
  st->dim = hidden.shape[1];

  Driver* driver = require_gpu();
  for (const TensorView* t : {&hidden, &targets}) check_resident(driver, *t);
  for (const auto* layout : {&st->segments, &st->teacher_segments})
    for (const SegmentBinding& s : *layout) {
      check_resident(driver, s.weight);
      if (s.bias) check_resident(driver, *s.bias);
    }
  if (teacher_hidden) check_resident(driver, *teacher_hidden);
  for (const auto* out : {&outputs.loss, &outputs.row_loss, &outputs.lse})
    if (*out) check_resident(driver, **out);
  TILEJIT_USER_CHECK(outputs.d_weight.empty() || outputs.d_weight.size() == prog.segments.size(),
                     "program {}: {} d_weight outputs for {} segments", prog.name,
                     outputs.d_weight.size(), prog.segments.size());
  st->d_weight_outputs.resize(prog.segments.size());
  for (size_t s = 0; s < outputs.d_weight.size(); ++s) {
    if (!outputs.d_weight[s]) continue;
    const Segment& seg = prog.segments[s];
    const TensorView dw = named(*outputs.d_weight[s], "d_" + seg.weight);
    check_weight_grad(dw, hidden.dtype, seg.size(), st->dim, "V_" + seg.name);
    check_resident(driver, dw);
    st->d_weight_outputs[s] = dw;
  }
  st->kernels = prepare(prog, elem_of(hidden.dtype), device_arch(0));
  PreparedLoss& K = *st->kernels;
  const LossProgram& P = K.lowered.program;
  st->threshold = effective_threshold(K.lowered, options, hidden.dtype);
  st->analytic_smoothing = P.label_smoothing > 0 && K.lowered.logit_is_identity;
  st->args = pack_args(K.layout, captures);
  st->layout = device_layout(P, st->segments);
  if (P.kl) {
    st->teacher.layout = device_layout(P, st->teacher_segments);
    st->teacher.dim = static_cast<int32_t>(teacher_hidden->shape[1]);
    st->teacher.inv_temperature = static_cast<float>(1.0 / P.kl->temperature);
  }
  const int32_t n = static_cast<int32_t>(st->n_rows), dim = static_cast<int32_t>(st->dim);
  // The Hopper loop's forwards (sm_90a modules) add a warpgroup that only loads, and a stage; the
  // KL forward runs there in clusters along the splits (LinearCeOptions::kl_forward_cluster).
  const bool sm90_loop = K.arch == "sm_90a" && linear_ce_tile_loop() == CeTileLoop::Sm90;
  const bool sm90_fwd = !P.kl && sm90_loop;
  PositionOrderCopies copies(K.function(LossModule::Rows, "linear_ce_gather_rows"), stream);

  // Targets: narrowed and checked, rows compacted; one read-back gives the verdict and n_kept.
  // The Hopper forward's weight copies in position order need the order alone: where the state's
  // next order is known (no rebuild due), they are queued before it and run while the host waits.
  st->rows = DeviceBuffer::on_stream((3 * size_t(std::max(n, 1)) + 2) * sizeof(int32_t), stream);
  int32_t* status = st->status();
  if (n > 0) {
    if (targets.dtype == DType::I64)
      run(K.function(LossModule::Rows, "linear_ce_check_targets_i64"), {1}, {1024}, 0, stream,
          static_cast<const long long*>(targets.data), static_cast<long long>(targets.strides[0]),
          n, static_cast<long long>(P.ignore_index), st->layout, st->targets32(), status + 1);
    else
      run(K.function(LossModule::Rows, "linear_ce_check_targets_i32"), {1}, {1024}, 0, stream,
          static_cast<const int32_t*>(targets.data), static_cast<long long>(targets.strides[0]), n,
          static_cast<long long>(P.ignore_index), st->layout, st->targets32(), status + 1);
    run(K.function(LossModule::Rows, "linear_ce_compact_rows"), {1}, {1024}, 0, stream,
        static_cast<const int32_t*>(st->targets32()), n, int32_t{kIgnoredTarget}, st->kept(),
        st->slot(), status);
    const std::shared_ptr<const VocabOrderTables> expected =
        sm90_fwd && options.copy_ordered_weights ? upcoming_order(P, options, st->threshold)
                                                 : nullptr;
    int32_t verdict[2];
    if (expected) {
      const StreamMark compacted(stream);
      expected->ready_on(stream);
      const CeLayout ordered = with_order(st->layout, expected.get());
      for (int32_t s = 0; s < ordered.num_segments; ++s)
        if (ordered.seg[s].order) copies.copy(ordered.seg[s], dim, &st->d_weight_outputs[s]);
      compacted.then_on_side_stream([&](CUstream side) {
        driver->memcpy_dtoh_async(verdict, reinterpret_cast<CUdeviceptr>(status), sizeof verdict,
                                  side);
      });
    } else {
      driver->stream_synchronize(stream);
      driver->memcpy_dtoh(verdict, reinterpret_cast<CUdeviceptr>(status), sizeof verdict);
    }
    if (verdict[1] >= 0) bad_target(P, targets, driver, verdict[1]);
    st->n_kept = verdict[0];
  }

  // The vocabulary order (LinearCeOrder.h), before the workspace is sized: a state that found
  // filtering unable to pay turns it off for this forward.
  if (st->n_kept > 0) {
    st->order = forward_order(P, options, st->threshold, [&] {
      PrePass pass{.layout = &st->layout, .hidden = hidden.data, .kept = st->kept()};
      pass.colsum_part = K.function(LossModule::Rows, "linear_ce_colsum_part");
      pass.sum_parts = K.function(LossModule::Rows, "linear_ce_sum_parts");
      pass.average_logit = K.function(LossModule::Rows, "linear_ce_average_logit");
      pass.order_keys = K.function(LossModule::Rows, "linear_ce_order_keys");
      pass.radix_counts = K.function(LossModule::Rows, "linear_ce_radix_counts");
      pass.radix_offsets = K.function(LossModule::Rows, "linear_ce_radix_offsets");
      pass.radix_scatter = K.function(LossModule::Rows, "linear_ce_radix_scatter");
      pass.rank_of = K.function(LossModule::Rows, "linear_ce_rank_of");
      pass.hidden_stride = hidden.strides[0];
      pass.n_kept = static_cast<int32_t>(st->n_kept);
      pass.dim = dim;
      pass.is_f16 = hidden.dtype == DType::F16;
      return order_by_average_logit(pass, driver, stream);
    });
    if (!st->order.filter) st->threshold = 0;
    // An order built on the device by an earlier step on another stream: this stream waits.
    if (st->order.tables) st->order.tables->ready_on(stream);
    st->layout = with_order(st->layout, st->order.tables.get());
    if (P.kl) st->teacher.layout = with_order(st->teacher.layout, st->order.tables.get());
  }

  LinearCeShape shape;
  shape.n_rows = n;
  shape.n_kept = st->n_kept;
  shape.dim = dim;
  for (const Segment& s : P.segments) shape.segment_sizes.push_back(s.size());
  shape.num_sms = driver->attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0);
  shape.filtering = st->threshold > 0;
  shape.smoothing = P.label_smoothing > 0;
  shape.analytic_smoothing = st->analytic_smoothing;
  shape.kl = P.kl.has_value();
  shape.teacher_dim = st->teacher.dim;
  const int kl_cluster_asked = kl_forward_cluster(P, options);  // checked on every path
  const int kl_cluster = P.kl && sm90_loop ? kl_cluster_asked : 1;
  shape.split_cluster = kl_cluster;
  st->grad_buffer_bytes = options.grad_buffer_bytes;
  try {
    st->ws = plan_linear_ce(shape);
  } catch (const std::invalid_argument& e) {
    user_error("program {}: {}", P.name, e.what());
  }
  const LinearCeWorkspace& ws = st->ws;

  LinearCeForward out;
  out.n_rows = n;
  out.n_kept = st->n_kept;
  out.filter_threshold = st->threshold;
  out.vocab_ordered = st->order.tables != nullptr;
  out.loss = outputs.loss ? *outputs.loss : st->outputs.take(1, {1}, "loss");
  out.row_loss = outputs.row_loss ? *outputs.row_loss : st->outputs.take(n, {n}, "row_loss");
  out.lse = outputs.lse ? *outputs.lse : st->outputs.take(n, {n}, "lse");
  float* loss = static_cast<float*>(out.loss.data);
  float* row_loss = static_cast<float*>(out.row_loss.data);
  float* lse = static_cast<float*>(out.lse.data);
  CUfunction fill = K.function(LossModule::Rows, "linear_ce_fill");
  if (st->n_kept == 0) {  // nothing to reduce: a zero loss, zero rows
    run(fill, {1}, {32}, 0, stream, loss, 1LL, 1LL, 1LL, 0.f);
    for (float* v : {row_loss, lse})
      if (n > 0)
        run(fill, {blocks(n, 256)}, {256}, 0, stream, v, 1LL, (long long)n, (long long)n, 0.f);
    out.state = std::move(st);
    return out;
  }
  st->forward = DeviceBuffer::on_stream(ws.saved_end, stream);
  const int32_t n_kept = static_cast<int32_t>(st->n_kept);
  void* hidden_kept = st->fwd<void>(ws.hidden_kept);
  run(K.function(LossModule::Rows, "linear_ce_gather_rows"), {static_cast<unsigned>(n_kept)}, {128},
      0, stream, static_cast<const void*>(hidden.data), static_cast<long long>(hidden.strides[0]),
      static_cast<const int32_t*>(st->kept()), dim, hidden_kept);

  if (P.kl) {  // the teacher's kept rows, like E's
    void* teacher_kept = st->fwd<void>(ws.teacher_hidden_kept);
    run(K.function(LossModule::Rows, "linear_ce_gather_rows"), {static_cast<unsigned>(n_kept)},
        {128}, 0, stream, static_cast<const void*>(teacher_hidden->data),
        static_cast<long long>(teacher_hidden->strides[0]), static_cast<const int32_t*>(st->kept()),
        st->teacher.dim, teacher_kept);
    st->teacher.hidden = teacher_kept;
    st->teacher.hidden_stride = st->teacher.dim;
  }

  CeFwdParams p;
  p.layout = st->layout;
  p.rows = {hidden_kept, dim, st->kept(), st->targets32(), n_kept, dim};
  p.target_logit = st->fwd<float>(ws.target_logit);
  p.target_raw = st->fwd<float>(ws.target_raw);
  p.tiles_per_split = ws.tiles_per_split;
  p.row_group = shared_tiles_group(shape.num_sms);
  if (P.kl) {
    p.kl.teacher = st->teacher;
    p.kl.teacher.shared_weights = shared_teacher_weights(p.layout, p.kl.teacher, dim);
    p.kl.teacher_target_logit = st->fwd<float>(ws.teacher_target_logit);
  }
  CeFwdMaps maps{};
  CeKlMaps kl_maps{};
  void* fwd_params[] = {st->args.data(), &p, P.kl ? static_cast<void*>(&kl_maps) : &maps};
  const std::string_view fwd_kernel = P.kl ? "linear_ce_fwd_kl" : "linear_ce_fwd";
  const int fwd_threads = P.kl ? (sm90_loop ? kCeKlFwdSm90Threads : kCeKlFwdThreads)
                               : (sm90_fwd ? kCeFwdSm90Threads : kCeFwdThreads);
  const int fwd_smem = P.kl ? (sm90_loop ? kCeKlFwdSm90SmemBytes : kCeKlFwdSmemBytes)
                            : (sm90_fwd ? kCeFwdSm90SmemBytes : kCeFwdSmemBytes);
  static_assert(kCeFwdTmaRows == kCeFwdRows && kCeWeightTmaRows == kTileIds,
                "the TMA boxes are the forward's tiles");
  const bool f16 = hidden.dtype == DType::F16;
  if (sm90_fwd) {  // its tiles come by TMA: the compacted rows, the weights (an ordered
                   // segment's from a copy in position order, unless the caller declined it)
    maps.hidden = encode_tensor_map(ce_hidden_tensor_map_args(hidden_kept, n_kept, dim, f16));
    for (int32_t s = 0; s < p.layout.num_segments; ++s) {
      const CeSegment& seg = p.layout.seg[s];
      const void* weight = seg.weight;
      int64_t stride = seg.weight_stride;
      if (seg.order && options.copy_ordered_weights) {
        weight = copies.copy(seg, dim, &st->d_weight_outputs[s]);
        if (st->d_weight_outputs[s] && weight == st->d_weight_outputs[s]->data)
          st->weights_in_grad_buffer |= 1u << s;
        stride = dim;
        p.weights_in_position_order |= 1 << s;
      }
      maps.weight[s] =
          encode_tensor_map(ce_weight_tensor_map_args(weight, seg.size, dim, stride, f16));
    }
  }
  if (P.kl && sm90_loop) {  // likewise, both sides of an ordered segment: the teacher's from the
                            // pool, unless it shares the student's weights (and so the copy)
    kl_maps = kl_operand_maps(p.layout, p.rows, p.kl.teacher, f16, kl_cluster);
    p.split_cluster = kl_cluster;
    const CeTeacher& t = p.kl.teacher;
    for (int32_t s = 0; s < p.layout.num_segments; ++s) {
      const CeSegment& seg = p.layout.seg[s];
      const CeSegment& tseg = t.layout.seg[s];
      if (!seg.order || !options.copy_ordered_weights) continue;
      void* copy = copies.copy(seg, dim, &st->d_weight_outputs[s]);
      if (st->d_weight_outputs[s] && copy == st->d_weight_outputs[s]->data)
        st->weights_in_grad_buffer |= 1u << s;
      const bool shared = (t.shared_weights >> s) & 1;
      void* teacher_copy = shared ? copy : copies.copy(tseg, t.dim, nullptr);
      kl_maps.weight[s] =
          encode_tensor_map(ce_weight_tensor_map_args(copy, seg.size, dim, dim, f16));
      kl_maps.teacher_weight[s] =
          encode_tensor_map(ce_weight_tensor_map_args(teacher_copy, tseg.size, t.dim, t.dim, f16));
      p.weights_in_position_order |= 1 << s;
    }
  }
  // The forward's scratch: the splits' partials and the tile maxima, back to the pool in stream
  // order when this call returns; only the classes derived from the maxima are kept.
  const DeviceBuffer scratch_buffer =
      DeviceBuffer::on_stream(forward_scratch_bytes(*st, sm90_loop), stream);
  auto fwd_scratch = [&](const WorkspaceSlice& s) {
    return slice_address(scratch_buffer.data(), ws.saved_end, s);
  };
  p.part_max = static_cast<float*>(fwd_scratch(ws.part_max));
  p.part_sum = static_cast<float*>(fwd_scratch(ws.part_sum));
  p.part_zsum = static_cast<float*>(fwd_scratch(ws.part_zsum));
  p.tile_max = static_cast<uint16_t*>(fwd_scratch(ws.tile_max));
  if (P.kl) {
    float* kl_parts = static_cast<float*>(fwd_scratch(ws.kl_parts));
    const int64_t part = int64_t(ws.splits) * n_kept;
    p.kl.tempered_max = kl_parts;
    p.kl.tempered_sum = kl_parts + part;
    p.kl.teacher_max = kl_parts + 2 * part;
    p.kl.teacher_sum = kl_parts + 3 * part;
    p.kl.cross = kl_parts + 4 * part;
    p.kl.teacher_tile_max = static_cast<uint16_t*>(fwd_scratch(ws.teacher_tile_max));
  }
  launch(K.function(LossModule::Forward, fwd_kernel, fwd_smem),
         {static_cast<unsigned>(ws.fwd_row_tiles), static_cast<unsigned>(ws.splits)},
         {static_cast<unsigned>(fwd_threads)}, {1, static_cast<unsigned>(kl_cluster)}, fwd_smem,
         stream, fwd_params);
  copies.release();

  CeMergeParams q;
  q.part_max = p.part_max;
  q.part_sum = p.part_sum;
  q.part_zsum = p.part_zsum;
  q.target_logit = p.target_logit;
  q.slot = st->slot();
  q.lse = st->fwd<float>(ws.lse);
  q.row_loss = st->fwd<float>(ws.row_loss);
  q.loss_rows = row_loss;
  q.n_rows = n;
  q.n_kept = n_kept;
  q.splits = ws.splits;
  q.live_ids = st->layout.live_ids;
  q.label_smoothing = static_cast<float>(P.label_smoothing);
  q.z_loss = static_cast<float>(P.z_loss);
  if (P.kl) {
    q.kl.tempered_max = p.kl.tempered_max;
    q.kl.tempered_sum = p.kl.tempered_sum;
    q.kl.teacher_max = p.kl.teacher_max;
    q.kl.teacher_sum = p.kl.teacher_sum;
    q.kl.cross = p.kl.cross;
    q.kl.tempered_lse = st->fwd<float>(ws.tempered_lse);
    q.kl.teacher_lse = st->fwd<float>(ws.teacher_lse);
    q.kl.alpha = static_cast<float>(P.kl->alpha);
    q.kl.temperature = static_cast<float>(P.kl->temperature);
  }
  run(K.function(LossModule::Rows, "linear_ce_merge"), {blocks(n, kCeMergeRows)}, {kCeMergeThreads},
      0, stream, q);
  run(K.function(LossModule::Rows, "linear_ce_scatter_rows"), {blocks(n, 256)}, {256}, 0, stream,
      static_cast<const int32_t*>(st->slot()), static_cast<const float*>(q.lse), n, lse);
  run(K.function(LossModule::Rows, "linear_ce_reduce"), {1}, {1024}, 0, stream,
      static_cast<const float*>(q.row_loss), n_kept, static_cast<int32_t>(P.reduction), loss);
  if (ws.saved_tile_class.bytes > 0) {  // the backward's (row tile, vocabulary tile) classes
    CeClassifyParams c = classify_params(*st, P);
    c.tile_max = p.tile_max;
    c.teacher_tile_max = p.kl.teacher_tile_max;
    c.tile_class = st->fwd<unsigned char>(ws.saved_tile_class);
    run(K.function(LossModule::Rows, "linear_ce_classify"),
        {static_cast<unsigned>(ws.row_tiles), blocks(ws.num_tiles, 64)}, {128}, 0, stream, c);
  }
  // Where the backward will move dC rows along the order's cycles (LinearCeBackward.cpp), the host
  // finds them now, while the GPU runs this forward, not between the backward's last kernels
  // with the GPU idle (an order just built on the device comes to the host first, on a stream
  // that waits for the pre-pass only).
  if (st->order.tables) {
    if (const uint32_t moved = segments_read_by_position(*st); moved != 0)
      st->order.tables->prepare_cycles(moved);
  }
  out.state = std::move(st);
  return out;
}

}  // namespace tilejit
