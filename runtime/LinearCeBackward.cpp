// The fused linear cross-entropy's backward (runtime/LinearCe.h): the visited tiles' lists from
// the (row tile, vocabulary tile) classes the forward kept, the choice between a filtered and the
// exact backward, the vocabulary chunks that the visited pairs' G blocks fill, and the
// kernels of kernels_templates/linear_ce_bwd.cuh (G), linear_ce_products.cuh (dE, dC, dbias)
// and linear_ce_corrections.cuh (dC of the unvisited tiles) per chunk.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "runtime/LinearCeChecks.h"
#include "runtime/LinearCeState.h"
#include "runtime/LinearCeTma.h"
#include "runtime/TensorMapEncode.h"
#include "runtime/VocabOrderPlan.h"

namespace tilejit {

using namespace linear_ce;  // the kernels' launch parameters (LinearCeParams.h)

LinearCeGradients linear_cross_entropy_backward(const LinearCeForward& forward,
                                                const TensorView& grad_loss_in, CUstream stream,
                                                const LinearCeGradOutputs& outputs) {
  const TensorView grad_loss = named(grad_loss_in, "grad_loss");
  TILEJIT_USER_CHECK(forward.state, "linear_cross_entropy_backward: the forward result is empty");
  const LinearCeState& st = *forward.state;
  PreparedLoss& K = *st.kernels;
  const LossProgram& P = K.lowered.program;
  const size_t num_segments = st.segments.size();
  const int32_t n = static_cast<int32_t>(st.n_rows), dim = static_cast<int32_t>(st.dim);
  check_f32_vector(grad_loss, P.reduction == Reduction::None ? n : -1);
  TILEJIT_USER_CHECK(outputs.d_weight.empty() || outputs.d_weight.size() == num_segments,
                     "program {}: {} d_weight outputs for {} segments", P.name,
                     outputs.d_weight.size(), num_segments);
  TILEJIT_USER_CHECK(outputs.d_bias.empty() || outputs.d_bias.size() == num_segments,
                     "program {}: {} d_bias outputs for {} segments", P.name, outputs.d_bias.size(),
                     num_segments);
  if (outputs.d_hidden) check_f32_matrix(named(*outputs.d_hidden, "d_hidden"), n, dim, "N");
  for (size_t s = 0; s < num_segments; ++s) {
    const Segment& seg = P.segments[s];
    if (!outputs.d_weight.empty() && outputs.d_weight[s])
      check_weight_grad(named(*outputs.d_weight[s], "d_" + seg.weight), st.dtype, seg.size(), dim,
                        "V_" + seg.name);
    if (outputs.d_bias.empty() || !outputs.d_bias[s]) continue;
    TILEJIT_USER_CHECK(!seg.bias.empty(),
                       "program {}: segment '{}' has no bias, but a d_bias "
                       "output was given for it",
                       P.name, seg.name);
    check_f32_vector(named(*outputs.d_bias[s], "d_" + seg.bias), seg.size());
  }
  Driver* driver = require_gpu();
  check_resident(driver, grad_loss);
  if (outputs.d_hidden) check_resident(driver, *outputs.d_hidden);
  for (const auto& outs : {outputs.d_weight, outputs.d_bias})
    for (const std::optional<TensorView>& t : outs)
      if (t) check_resident(driver, *t);

  auto storage = std::make_shared<Storage>();
  LinearCeGradients g;
  g.d_hidden =
      outputs.d_hidden ? *outputs.d_hidden : storage->take(size_t(n) * dim, {n, dim}, "d_hidden");
  CeLayout layout = st.layout;
  for (size_t s = 0; s < num_segments; ++s) {
    const Segment& seg = P.segments[s];
    // The caller's buffer: this call's, else the forward's (checked there), else the library's.
    const bool given = !outputs.d_weight.empty() && outputs.d_weight[s];
    const std::optional<TensorView>& early = st.d_weight_outputs[s];
    g.d_weight.push_back(
        given   ? *outputs.d_weight[s]
        : early ? *early
                : storage->take(size_t(seg.size()) * dim, {seg.size(), dim}, "d_" + seg.weight));
    layout.seg[s].d_weight = g.d_weight[s].data;
    layout.seg[s].d_weight_stride = g.d_weight[s].strides[0];
    layout.seg[s].d_weight_16 = g.d_weight[s].dtype != DType::F32;
    g.d_bias.emplace_back();
    if (seg.bias.empty()) continue;
    const bool bias_given = !outputs.d_bias.empty() && outputs.d_bias[s];
    g.d_bias[s] = bias_given ? *outputs.d_bias[s]
                             : storage->take(size_t(seg.size()), {seg.size()}, "d_" + seg.bias);
    layout.seg[s].d_bias = static_cast<float*>(g.d_bias[s]->data);
  }
  g.storage = storage;
  // The forward's buffers are freed only after the reads this call enqueues on `stream`: an
  // event there once it returns (or throws) with everything enqueued.
  struct UsedUntilReturn {
    const LinearCeState& st;
    CUstream stream;
    ~UsedUntilReturn() { st.used_on(stream); }
  } used_until_return{st, stream};

  // The backward's scratch, in `stream`'s order: freed when this call returns, once the kernels
  // enqueued here are done (nothing here waits for the GPU).
  const LinearCeWorkspace& ws = st.ws;
  const DeviceBuffer scratch_buffer =
      DeviceBuffer::on_stream(std::max<int64_t>(ws.total_bytes - ws.forward_end, 1), stream);
  auto bwd = [&](const WorkspaceSlice& s) {
    return slice_address(scratch_buffer.data(), ws.forward_end, s);
  };
  float* row_grad = static_cast<float*>(bwd(ws.row_grad));
  float* d_hidden = static_cast<float*>(g.d_hidden.data);
  const long long dh_stride = g.d_hidden.strides[0];
  const int32_t reduction = static_cast<int32_t>(P.reduction);
  const int32_t n_kept = static_cast<int32_t>(st.n_kept);
  if (n > 0)
    run(K.function(LossModule::Rows, "linear_ce_row_grad"), {static_cast<unsigned>(n)}, {128}, 0,
        stream, static_cast<const int32_t*>(st.slot()), static_cast<const float*>(grad_loss.data),
        reduction, n_kept, row_grad, d_hidden, dh_stride, dim);
  CUfunction fill = K.function(LossModule::Rows, "linear_ce_fill");
  if (n_kept == 0) {  // no row has a gradient: the weights' gradients are zero
    for (size_t s = 0; s < num_segments; ++s) {
      const CeSegment& c = layout.seg[s];
      // A 16-bit gradient is filled as fp32 pairs (dim and the stride are even; +0 either way).
      const long long rows = c.size, cols = c.d_weight_16 ? dim / 2 : dim;
      const long long stride = c.d_weight_16 ? c.d_weight_stride / 2 : c.d_weight_stride;
      run(fill, {blocks(rows * cols, 256 * 8)}, {256}, 0, stream, c.d_weight, rows, cols, stride,
          0.f);
      if (c.d_bias)
        run(fill, {blocks(rows, 256)}, {256}, 0, stream, c.d_bias, 1LL, rows, rows, 0.f);
    }
    return g;
  }

  CeBwdParams p;
  p.rows = {st.fwd<void>(ws.hidden_kept), dim, st.kept(), st.targets32(), n_kept, dim};
  // The (row tile, vocabulary tile) classes: the forward's, from its tile maxima (filtering), or
  // every tile visited (written here: the exact backward).
  CeClassifyParams c = classify_params(st, P);
  c.tile_class = static_cast<unsigned char*>(bwd(ws.tile_class));
  const bool filtered = st.threshold > 0;
  const int32_t num_tiles = layout.num_tiles, row_tiles = ws.row_tiles;
  p.row_list = static_cast<int32_t*>(bwd(ws.row_list));
  p.row_count = static_cast<int32_t*>(bwd(ws.row_count));
  p.col_list = static_cast<int32_t*>(bwd(ws.col_list));
  p.col_count = static_cast<int32_t*>(bwd(ws.col_count));
  p.col_steps = static_cast<int32_t*>(bwd(ws.col_steps));
  p.col_corrections = static_cast<int32_t*>(bwd(ws.col_corrections));
  p.pair_rank = static_cast<int32_t*>(bwd(ws.pair_rank));
  p.pair_first = static_cast<int32_t*>(bwd(ws.pair_first));
  p.staged_first = static_cast<int32_t*>(bwd(ws.staged_first));
  p.pair_list = static_cast<int32_t*>(bwd(ws.pair_list));
  // The gradient tiles on the Hopper loop compute each chunk's pairs in groups
  // (linear_ce_pair_visit): the rows their products read again for every vocabulary tile then
  // come from L2. Measured (H100, N 8192, exact forward + backward): Gemma-2 59.4 -> 57.3 ms,
  // Llama-3 51.6 -> 50.4, V 248k 124.9 -> 122.8; state steps level to 0.4 ms faster.
  int32_t* pair_visit = static_cast<int32_t*>(bwd(ws.pair_visit));
  // The products on the Hopper loop (sm_90a modules) add a warpgroup that only loads, and a stage;
  // their weight tiles come by TMA, staged per chunk for segments with an order (unless read in
  // position order, below).
  const bool sm90_products = K.hopper_products();
  // The weights in position order: where the forward left an ordered segment's weights in
  // position order in the 16-bit gradient buffer (LinearCeOutputs::d_weight) that dC goes to,
  // the Hopper kernels read their tiles there rather than from a per-chunk staged copy, which
  // leaves the whole chunk budget to G. Each chunk writes its dC rows there by position, over
  // the rows of the copy that only that chunk reads, once its G and dE are done (stream order),
  // and linear_ce_move_cycles puts every row where it belongs at the end. (fp32 rows would
  // overwrite later chunks' rows of the copy.) A KL program's gradient tiles read the student's
  // tiles there too (kl_maps), and a teacher sharing its weights reads the student's tile.
  uint32_t overwritten = 0;  // the segments whose dC goes where the forward left a copy
  for (int32_t s = 0; s < layout.num_segments; ++s)
    if (st.d_weight_outputs[s] && g.d_weight[s].data == st.d_weight_outputs[s]->data)
      overwritten |= 1u << s;
  const uint32_t copies = st.weights_in_grad_buffer.fetch_and(~overwritten) & overwritten;
  for (int32_t s = 0; s < layout.num_segments && sm90_products; ++s) {
    CeSegment& seg = layout.seg[s];
    if (seg.order &&
        weights_read_by_position(copies >> s & 1, seg.d_weight_16, seg.d_weight_stride, dim))
      seg.weights_by_position = seg.d_weight_by_position = 1;
  }
  // The visited tiles' lists for classes in `visit`'s order (the forward's, or every tile's after
  // `classify_all`), and the visited pairs' numbering (linear_ce_bwd.cuh "G").
  auto list_tiles = [&](const CeLayout& visit) {
    run(K.function(LossModule::Rows, "linear_ce_row_lists"), {static_cast<unsigned>(row_tiles)},
        {256}, 0, stream, p.tile_class, num_tiles, p.row_list, p.row_count);
    run(K.function(LossModule::Rows, "linear_ce_col_lists"), {blocks(num_tiles, 128)}, {128}, 0,
        stream, p.tile_class, num_tiles, row_tiles, p.col_list, p.col_count, p.col_steps,
        p.col_corrections, p.pair_rank);
    run(K.function(LossModule::Rows, "linear_ce_pair_offsets"), {1}, {1024}, 0, stream, visit,
        p.col_count, int32_t{sm90_products}, p.pair_first, p.staged_first);
    run(K.function(LossModule::Rows, "linear_ce_pair_list"), {blocks(num_tiles, 128)}, {128}, 0,
        stream, p.col_list, p.col_count, p.pair_first, num_tiles, row_tiles, p.pair_list);
  };
  auto classify_all = [&](const CeLayout& visit) {
    c.layout = visit;
    run(K.function(LossModule::Rows, "linear_ce_classify"),
        {static_cast<unsigned>(row_tiles), blocks(num_tiles, 64)}, {128}, 0, stream, c);
    p.tile_class = c.tile_class;
  };
  if (filtered)
    p.tile_class = st.fwd<unsigned char>(ws.saved_tile_class);
  else
    classify_all(layout);
  list_tiles(layout);
  g.surviving_fraction = g.computed_half_fraction = 1;
  // Each vocabulary tile's visited row tiles: all of them, unless the classes are read back.
  std::vector<int32_t> tile_pairs(num_tiles, row_tiles);
  if (filtered) {  // keep filtering (and the order) only if it saves more than it costs
    std::vector<int32_t> tile_halves(num_tiles);
    driver->stream_synchronize(stream);
    driver->memcpy_dtoh(tile_pairs.data(), reinterpret_cast<CUdeviceptr>(p.col_count),
                        tile_pairs.size() * sizeof(int32_t));
    driver->memcpy_dtoh(tile_halves.data(), reinterpret_cast<CUdeviceptr>(p.col_steps),
                        tile_halves.size() * sizeof(int32_t));
    const int64_t visited = std::accumulate(tile_pairs.begin(), tile_pairs.end(), int64_t{0});
    const int64_t halves = std::accumulate(tile_halves.begin(), tile_halves.end(), int64_t{0});
    const int64_t total = int64_t(row_tiles) * num_tiles;
    g.surviving_fraction = surviving_fraction(visited, total);
    g.computed_half_fraction = visited > 0 ? double(halves) / double(2 * visited) : 1.0;
    if (st.order.state) st.order.state->record_survival(*st.order.tables, g.surviving_fraction);
    const bool filter = filter_backward(visited, total, st.order.tables != nullptr);
    g.vocab_ordered = st.order.tables && filter;
    if (!filter) {  // every tile, natural order: exactly the unfiltered backward
      layout = with_order(layout, nullptr);
      for (int32_t s = 0; s < layout.num_segments; ++s)
        layout.seg[s].weights_by_position = layout.seg[s].d_weight_by_position = 0;
      classify_all(layout);
      list_tiles(layout);
      std::fill(tile_pairs.begin(), tile_pairs.end(), row_tiles);
      g.computed_half_fraction = 1;
    }
  }
  const bool some_skipped = p.tile_class != c.tile_class;  // the forward's classes
  p.layout = layout;
  if (P.kl) {
    p.kl.teacher = st.teacher;
    p.kl.teacher.layout = g.vocab_ordered || !st.order.tables
                              ? st.teacher.layout
                              : with_order(st.teacher.layout, nullptr);
    p.kl.teacher.shared_weights = shared_teacher_weights(p.layout, p.kl.teacher, dim);
    p.kl.tempered_lse = c.tempered_lse;
    p.kl.teacher_lse = c.teacher_lse;
    p.kl.teacher_target_logit = st.fwd<float>(ws.teacher_target_logit);
    p.kl.weight = static_cast<float>(P.kl->alpha * P.kl->temperature);
  }
  p.lse = c.lse;
  p.target_logit = st.fwd<float>(ws.target_logit);
  p.target_raw = st.fwd<float>(ws.target_raw);
  p.row_grad = row_grad;
  p.d_hidden = d_hidden;
  p.d_hidden_stride = dh_stride;
  p.num_row_tiles = row_tiles;
  const double eps = P.label_smoothing, alpha = P.kl ? P.kl->alpha : 0.0;
  p.prob_weight = static_cast<float>(1 - alpha);
  p.target_weight = static_cast<float>((1 - alpha) * (1 - eps));
  p.uniform = static_cast<float>((1 - alpha) * eps / static_cast<double>(layout.live_ids));
  p.z_loss = static_cast<float>(P.z_loss);

  if (st.analytic_smoothing) {  // sum_v C_v, sum_r g_r E_r, sum_r g_r
    CUfunction part = K.function(LossModule::Rows, "linear_ce_colsum_part");
    CUfunction sum = K.function(LossModule::Rows, "linear_ce_sum_parts");
    float* partial = static_cast<float*>(bwd(ws.colsum_partial));
    const int32_t per = static_cast<int32_t>(ws.colsum_rows_per_part), dx = blocks(dim, 256);
    const int32_t is_f16 = st.dtype == DType::F16;
    int32_t parts = 0;
    for (size_t s = 0; s < num_segments; ++s) {
      const CeSegment& seg = layout.seg[s];
      int32_t k = (seg.size + per - 1) / per;
      run(part, {static_cast<unsigned>(dx), static_cast<unsigned>(k)}, {256}, 0, stream, seg.weight,
          seg.weight_stride, seg.size, static_cast<const int32_t*>(nullptr),
          static_cast<const float*>(nullptr), dim, per, is_f16, partial + int64_t(parts) * dim);
      parts += k;
    }
    float* colsum = static_cast<float*>(bwd(ws.weight_colsum));
    run(sum, {static_cast<unsigned>(dx)}, {256}, 0, stream, static_cast<const float*>(partial),
        parts, dim, colsum);
    int32_t k = (n_kept + per - 1) / per;
    float* rows_part = partial + int64_t(parts) * dim;
    run(part, {static_cast<unsigned>(dx), static_cast<unsigned>(k)}, {256}, 0, stream,
        p.rows.hidden, static_cast<long long>(dim), n_kept, static_cast<const int32_t*>(nullptr),
        static_cast<const float*>(row_grad), dim, per, is_f16, rows_part);
    float* wsum = static_cast<float*>(bwd(ws.hidden_wsum));
    run(sum, {static_cast<unsigned>(dx)}, {256}, 0, stream, static_cast<const float*>(rows_part), k,
        dim, wsum);
    float* gsum = static_cast<float*>(bwd(ws.grad_sum));
    run(K.function(LossModule::Rows, "linear_ce_reduce"), {1}, {1024}, 0, stream,
        static_cast<const float*>(row_grad), n_kept, int32_t{1} /* sum */, gsum);
    p.weight_colsum = colsum;
    p.hidden_wsum = wsum;
    p.grad_sum = gsum;
  }

  if (some_skipped) {  // targets in skipped tiles: sparse corrections (linear_ce_corrections.cuh)
    p.target_grad = static_cast<float*>(bwd(ws.target_grad));
    p.target_slot = static_cast<int32_t*>(bwd(ws.target_slot));
    void* target_params[] = {const_cast<unsigned char*>(st.args.data()), &p};
    launch(K.function(LossModule::Gradient,
                      P.kl ? "linear_ce_target_grad_kl" : "linear_ce_target_grad"),
           {blocks(n_kept, 256)}, {256}, 0, stream, target_params);
  }
  // The gradient tiles: on the Hopper loop a persistent CTA per SM whose operands come by TMA
  // (an ordered segment's weights from the chunk's staged copy; a KL teacher's own ordered
  // weights gathered as in the KL forward) and which stores G by TMA.
  const bool sm90_grad = sm90_products;
  const int grad_smem = !sm90_grad ? kCeGradSmemBytes
                        : P.kl     ? kCeGradKlSm90SmemBytes
                                   : kCeGradSm90SmemBytes;
  const int grad_threads = !sm90_grad ? kCeGradThreads
                           : P.kl     ? kCeGradKlSm90Threads
                                      : kCeGradSm90Threads;
  CUfunction grad =
      K.function(LossModule::Gradient, P.kl ? "linear_ce_grad_kl" : "linear_ce_grad", grad_smem);
  const unsigned num_sms = static_cast<unsigned>(std::max(ws.num_sms, 1));  // the forward's
  const int product_threads = sm90_products ? kCeProductSm90Threads : kCeProductThreads;
  const int product_smem = sm90_products ? kCeProductSm90SmemBytes : kCeProductSmemBytes;
  // The chunks: runs of tiles whose visited pairs' G blocks and staged weight tiles (the visited
  // tiles of segments with an order, on the Hopper products) fit grad_buffer_bytes, in a buffer
  // of the largest one's size, in `stream`'s order.
  std::vector<uint8_t> staged_tile(num_tiles, 0);
  bool stage_weights = false;
  for (int32_t s = 0; s < layout.num_segments; ++s) {
    const CeSegment& seg = layout.seg[s];
    if (!sm90_products || !seg.order || seg.weights_by_position) continue;
    const int32_t end = seg.first_tile + static_cast<int32_t>(blocks(seg.size, kTileIds));
    for (int32_t t = seg.first_tile; t < end; ++t) staged_tile[t] = tile_pairs[t] > 0;
    stage_weights = true;
  }
  bool by_position = false;
  for (int32_t s = 0; s < layout.num_segments; ++s)
    by_position |= layout.seg[s].weights_by_position;
  // (the end's row moves: looked up before any chunk writes dC by position)
  CUfunction save_heads =
      by_position ? K.function(LossModule::Rows, "linear_ce_save_cycle_heads") : nullptr;
  CUfunction move_rows =
      by_position ? K.function(LossModule::Rows, "linear_ce_move_cycles") : nullptr;
  const int64_t budget = grad_buffer_budget(st.grad_buffer_bytes, by_position, stage_weights);
  const CeBackwardPlan plan = plan_backward_chunks(tile_pairs, staged_tile, dim, budget);
  const DeviceBuffer grad_buffer = DeviceBuffer::on_stream(plan.buffer_bytes, stream);
  p.grad = grad_buffer.data();
  // The Hopper products' tiles come by TMA: maps of G's blocks, the kept rows, the chunk's staged
  // weight rows (after its blocks; encoded per chunk) and the segments' weights, 64 x 64 boxes.
  CeBwdMaps maps{};
  const bool f16 = st.dtype == DType::F16;
  auto map = [&](const void* data, int64_t rows, int64_t cols, int64_t stride) {
    return encode_tensor_map(
        ce_operand_tensor_map_args(data, rows, cols, stride, kCeProductTmaRows, f16));
  };
  CeKlMaps kl_maps{};  // a KL program's gradient tiles on the Hopper loop: their operands
  if (sm90_grad && P.kl) {
    kl_maps = kl_operand_maps(p.layout, p.rows, p.kl.teacher, f16);
    for (int32_t s = 0; s < layout.num_segments; ++s)  // the student's tiles in position order
      if (layout.seg[s].weights_by_position)
        kl_maps.weight[s] = encode_tensor_map(ce_weight_tensor_map_args(
            st.d_weight_outputs[s]->data, layout.seg[s].size, dim, dim, f16));
  }
  if (sm90_products) {
    maps.grad = map(p.grad, std::max<int64_t>(plan.max_pairs, 1) * kTileRows, kTileIds, kTileIds);
    maps.hidden = map(p.rows.hidden, n_kept, dim, dim);
    for (int32_t s = 0; s < layout.num_segments; ++s) {
      const CeSegment& seg = layout.seg[s];
      maps.weight[s] = seg.weights_by_position
                           ? map(st.d_weight_outputs[s]->data, seg.size, dim, dim)
                           : map(seg.weight, seg.size, dim, seg.weight_stride);
    }
  }
  CUfunction dhidden = K.function(LossModule::Products, "linear_ce_dhidden", product_smem);
  CUfunction dweight = K.function(LossModule::Products, "linear_ce_dweight", product_smem);
  // The cold tiles' f32 staging serves 16-bit dC with target corrections only; without it more
  // CTAs share an SM.
  bool cold_staging = false;
  for (size_t s = 0; s < num_segments; ++s)
    cold_staging |= layout.seg[s].d_weight_16 && p.target_grad != nullptr;
  const int cold_smem = cold_staging ? kCeColdSmemBytes : 0;
  CUfunction dweight_cold = K.function(LossModule::Products, "linear_ce_dweight_cold", cold_smem);
  CUfunction dbias = K.function(LossModule::Products, "linear_ce_dbias");
  CUfunction stage =
      stage_weights ? K.function(LossModule::Rows, "linear_ce_stage_weights") : nullptr;
  bool any_bias = false;
  for (size_t s = 0; s < num_segments; ++s) any_bias |= layout.seg[s].d_bias != nullptr;
  const unsigned dtiles = blocks(dim, 256);
  const Dim3 threads{static_cast<unsigned>(product_threads), 1, 1};
  // The Hopper products' item counters, two per chunk (dE's, dC's), zeroed before the first chunk
  DeviceBuffer item_counters;
  if (sm90_products) {
    item_counters = DeviceBuffer::on_stream(plan.chunks.size() * 2 * sizeof(int32_t), stream);
    driver->memset_d32_async(reinterpret_cast<CUdeviceptr>(item_counters.data()), 0,
                             plan.chunks.size() * 2, stream);
  }
  auto counter = [&](size_t i) {
    return sm90_products ? static_cast<int32_t*>(item_counters.data()) + i : nullptr;
  };
  for (size_t ci = 0; ci < plan.chunks.size(); ++ci) {
    const CeBackwardChunk& ch = plan.chunks[ci];
    p.chunk_first = ch.first_tile;
    p.chunk_tiles = ch.tiles;
    p.first_chunk = ci == 0;
    const unsigned chunk = static_cast<unsigned>(ch.tiles);
    if (ch.staged_tiles > 0) {  // before the gradient tiles and dE, which read it
      void* staged = static_cast<char*>(p.grad) + ch.pairs * CeBackwardPlan::kGradBlockBytes;
      maps.staged = map(staged, ch.staged_tiles * kTileIds, dim, dim);
      run(stage, {chunk, unsigned(kTileIds / 8)}, {256}, 0, stream, layout,
          static_cast<const int32_t*>(p.col_count), static_cast<const int32_t*>(p.staged_first),
          p.chunk_first, dim, staged);
    }
    if (ch.pairs > 0 && sm90_grad) {
      const int32_t group = shared_tiles_group(ws.num_sms);
      run(K.function(LossModule::Rows, "linear_ce_pair_visit"), {blocks(ch.pairs, 256)}, {256}, 0,
          stream, static_cast<const int32_t*>(p.pair_first),
          static_cast<const int32_t*>(p.pair_list), p.chunk_first, p.chunk_tiles, group,
          pair_visit);
      p.pair_visit = pair_visit;
    }
    if (ch.pairs > 0) {
      // (the KL program's kernel takes all four, the other one the first three)
      void* grad_params[] = {const_cast<unsigned char*>(st.args.data()), &p, &maps, &kl_maps};
      const unsigned pairs = static_cast<unsigned>(ch.pairs);
      launch(grad, {sm90_grad ? std::min(pairs, num_sms) : pairs},
             {static_cast<unsigned>(grad_threads)}, grad_smem, stream, grad_params);
    }
    // dE: the first chunk writes every kept row (its corrections too), later ones add theirs; on
    // the Hopper products one persistent CTA per SM over the (row tile, dim tile) items
    // (linear_ce_dhidden_items), else a CTA per item.
    const unsigned dhidden_items = dtiles * static_cast<unsigned>(row_tiles);
    p.item_counter = counter(2 * ci);
    if (ch.pairs > 0 || p.first_chunk)
      run(dhidden,
          sm90_products ? Dim3{std::min(num_sms, dhidden_items), 1, 1}
                        : Dim3{dtiles, static_cast<unsigned>(row_tiles), 1},
          threads, product_smem, stream, p, maps);
    // dC of the visited tiles: on the Hopper products one persistent CTA per SM over the chunk's
    // (tile, dim tile) items (linear_ce_dweight_items), else a CTA per item
    p.item_counter = counter(2 * ci + 1);
    if (ch.visited_tiles > 0)
      run(dweight,
          sm90_products ? Dim3{std::min(num_sms, dtiles * chunk), 1, 1}
                        : Dim3{dtiles, chunk, 1},
          threads, product_smem, stream, p, maps);
    if (ch.visited_tiles < ch.tiles)  // the tiles no row tile visits
      run(dweight_cold, {blocks(dim, 128), chunk}, {unsigned(kCeColdThreads)}, cold_smem, stream,
          p);
    if (any_bias) run(dbias, {blocks(int64_t(chunk) * kTileIds, 256)}, {256}, 0, stream, p);
  }
  // dC written by position: each row to the row of its weight, in place, along the order's cycles
  // (linear_ce_order.cuh), every run's first row saved aside first, in G's buffer if it fits.
  for (int32_t s = 0; s < layout.num_segments; ++s) {
    const CeSegment& seg = layout.seg[s];
    if (!seg.d_weight_by_position || !seg.order) continue;
    const VocabOrderTables::DeviceCycles cycles = st.order.tables->device_cycles(s);
    if (cycles.runs == 0) continue;
    const int32_t units = dim * 2 / 16;  // of a 16-bit row (dim is a multiple of 8)
    const int64_t head_bytes = int64_t(cycles.runs) * units * 16;
    DeviceBuffer own_heads;
    void* heads = grad_buffer.data();
    if (plan.buffer_bytes < head_bytes) {
      own_heads = DeviceBuffer::on_stream(head_bytes, stream);
      heads = own_heads.data();
    }
    const long long stride = seg.d_weight_stride * 2 / 16;
    run(save_heads, {static_cast<unsigned>(cycles.runs)}, {128}, 0, stream, cycles.rows,
        cycles.first, static_cast<const void*>(seg.d_weight), stride, units, heads);
    run(move_rows, {static_cast<unsigned>(cycles.runs)}, {128}, 0, stream, cycles.rows,
        cycles.first, cycles.next, seg.d_weight, stride, units, static_cast<const void*>(heads));
  }
  return g;
}

}  // namespace tilejit
