// Standalone GPU harness for the fused linear cross-entropy kernels (not part of the CMake build;
// tests/gpu/build_linear_ce_harness.sh builds it). Part 1 checks loss and gradients against the
// fp64 reference (tests/support/LinearCeReference.h) on small shapes, outputs poisoned first,
// with the vocabulary in natural order and ordered by average logit; part 2 times the PERF.md
// loss shapes on "zipf", "flat" and "peaked" data, filtering off, on, and on with the order, and
// prints a table plus one JSON line per case. The forward, gradient and dE / dC product kernels
// run the Hopper tile loop (ce_wgmma.cuh) unless `--loop portable` (or TILEJIT_CE_LOOP=portable)
// asks for the portable one (ce_mma.cuh), for comparison. Hook stand-ins below play the role of
// the generated TjProgram / TjArgs; the host logic mirrors runtime/LinearCe.cpp.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels_templates/linear_ce_fwd.cuh"
#include "kernels_templates/linear_ce_order.cuh"
#include "kernels_templates/linear_ce_products.cuh"
#include "runtime/LinearCeTma.h"
#include "runtime/LinearCeWorkspace.h"
#include "runtime/VocabOrderPlan.h"
#include "tests/gpu/linear_ce_harness_data.cuh"
#include "tests/gpu/tma_encode.h"
#include "tests/support/LinearCeReference.h"

using namespace tilejit_ce;

// ---- hook stand-ins -------------------------------------------------------------------------

struct NoArgs {
  int unused;
};
struct IdentityLogit {
  static constexpr bool kLogitIsIdentity = true;
  static constexpr bool kKlTempered = false;  // no KL term
  __device__ static float logit_mod(const NoArgs&, float x, int, int) { return x; }
  __device__ static float logit_grad(const NoArgs&, float, int, int) { return 1.f; }
};
struct CapArgs {
  float cap, inv_cap;
};
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
struct SoftcapLogit {  // cap * tanh(x / cap)
  static constexpr bool kLogitIsIdentity = false;
  static constexpr bool kKlTempered = false;
  __device__ static float logit_mod(const CapArgs& a, float x, int, int) {
    return a.cap * tanh_approx(x * a.inv_cap);
  }
  __device__ static float logit_grad(const CapArgs& a, float x, int, int) {
    float t = tanh_approx(x * a.inv_cap);
    return 1.f - t * t;
  }
};

// Which tile loop the forward, gradient and product kernels run (--loop, TILEJIT_CE_LOOP): the
// Hopper one by default.
bool g_sm90_loop = true;
const char* loop_name() { return g_sm90_loop ? "sm90" : "portable"; }

// ---- one run of the kernels -----------------------------------------------------------------

// The vocabulary order: none; by average logit with the library's backward choice (every tile
// in natural order when nearly every tile survives); by average logit, kept whatever survives.
enum class Order { Natural, ByAverageLogit, ByAverageLogitAlways };

struct Options {
  float label_smoothing = 0, z_loss = 0, threshold = 0, cap = 0;  // cap 0: identity logit
  int reduction = kReduceMean;
  int64_t grad_buffer_bytes = 512 << 20;
  Order order = Order::Natural;
};

template <class T>
T* slice(char* base, const tilejit::WorkspaceSlice& s) {
  return s.bytes ? reinterpret_cast<T*>(base + s.offset) : nullptr;
}

template <class Prog, class Args>
struct Runner {
  const Problem& P;
  Options o;
  Args args;
  tilejit::LinearCeWorkspace ws;
  char* base = nullptr;
  char* grad_buffer = nullptr;  // the backward's G blocks and staged weights (kept, grown)
  int64_t grad_capacity = 0;
  CeLayout layout;
  int n_kept = 0, num_sms = 0;
  float* upstream = nullptr;
  std::vector<float> h_upstream;  // [n_rows] (reduction none) or [1]
  // The vocabulary order: per segment, order and rank (device), built on the first forward.
  std::vector<int*> order_tables;
  float* order_scratch = nullptr;  // pre-pass: column sums of E, per-id averages
  bool order_built = false;
  // The last backward: the surviving fraction it read back (-1: none) and whether it kept the
  // order.
  double surviving = -1;
  bool kept_order = false;
  // Filtering paused: what a VocabOrder state does between rebuilds once its order left nearly
  // every tile alive (no tile maxima, every tile, natural order: the exact path).
  bool paused = false;

  Runner(const Problem& prob, Options opt, Args a) : P(prob), o(opt), args(a) {
    CK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
    int64_t tile = 0, live = 0;
    layout.num_segments = int(P.segs.size());
    for (size_t s = 0; s < P.segs.size(); ++s) {
      CeSegment& c = layout.seg[s];
      c.weight = P.segs[s].weight;
      c.bias = P.segs[s].bias;
      c.d_weight = P.segs[s].d_weight;
      c.d_bias = P.segs[s].d_bias;
      c.weight_stride = c.d_weight_stride = P.dim;
      c.begin = P.segs[s].begin;
      c.size = P.segs[s].size;
      c.first_tile = int(tile);
      tile += (c.size + kTileIds - 1) / kTileIds;
      live += c.size;
    }
    layout.num_tiles = int(tile);
    layout.live_ids = int(live);
    n_kept = 0;
    for (int t : P.h_targets) n_kept += t != kIgnore;
    tilejit::LinearCeShape shape;
    shape.n_rows = P.n_rows;
    shape.n_kept = n_kept;
    shape.dim = P.dim;
    for (auto& s : P.segs) shape.segment_sizes.push_back(s.size);
    shape.num_sms = num_sms;
    shape.filtering = o.threshold > 0;
    shape.smoothing = o.label_smoothing > 0;
    shape.analytic_smoothing = shape.smoothing && Prog::kLogitIsIdentity;
    ws = tilejit::plan_linear_ce(shape);
    CK(cudaMalloc(&base, ws.total_bytes));
    h_upstream.resize(o.reduction == kReduceNone ? P.n_rows : 1);
    std::mt19937 rng(7);
    for (auto& u : h_upstream)
      u = o.reduction == kReduceNone ? 0.5f + float(rng() % 1000) / 1000.f : 1.f;
    CK(cudaMalloc(&upstream, h_upstream.size() * 4));
    CK(cudaMemcpy(upstream, h_upstream.data(), h_upstream.size() * 4, cudaMemcpyHostToDevice));
    if (o.order != Order::Natural) {
      for (auto& s : P.segs) {
        int *ord, *rank;
        CK(cudaMalloc(&ord, size_t(s.size) * 4));
        CK(cudaMalloc(&rank, size_t(s.size) * 4));
        order_tables.push_back(ord);
        order_tables.push_back(rank);
      }
      const int parts = (std::max(n_kept, 1) + 511) / 512;
      CK(cudaMalloc(&order_scratch, (size_t(parts + 1) * P.dim + live) * 4));
    }
    const auto smem = cudaFuncAttributeMaxDynamicSharedMemorySize;
    CK(cudaFuncSetAttribute(linear_ce_fwd_kernel<Prog, Args, false, false>, smem,
                            CeFwdCta::kSmemBytes));
    CK(cudaFuncSetAttribute(linear_ce_fwd_kernel<Prog, Args, false, true>, smem,
                            CeFwdWsCta::kSmemBytes));
    CK(cudaFuncSetAttribute(linear_ce_grad_kernel<Prog, Args, false, false>, smem,
                            CeGradCta::kSmemBytes));
    CK(cudaFuncSetAttribute(linear_ce_grad_kernel<Prog, Args, false, true>, smem,
                            CeGradPingpongCta::kSmemBytes));
    CK(cudaFuncSetAttribute(linear_ce_dhidden_kernel<false, false>, smem,
                            CeProductCta::kSmemBytes));
    CK(cudaFuncSetAttribute(linear_ce_dhidden_kernel<false, true>, smem,
                            CeProductWsCta::kSmemBytes));
    CK(cudaFuncSetAttribute(linear_ce_dweight_kernel<false, false>, smem,
                            CeProductCta::kSmemBytes));
    CK(cudaFuncSetAttribute(linear_ce_dweight_kernel<false, true>, smem,
                            CeProductWsCta::kSmemBytes));
    CK(cudaFuncSetAttribute(linear_ce_dweight_cold_kernel<false>, smem, CeColdCta::kSmemBytes));
  }
  ~Runner() {
    cudaFree(base);
    cudaFree(grad_buffer);
    cudaFree(upstream);
    for (int* t : order_tables) cudaFree(t);
    cudaFree(order_scratch);
  }
  int64_t extra_bytes() const { return ws.total_bytes + grad_capacity; }
  bool has_bias() const {
    for (auto& s : P.segs)
      if (s.bias) return true;
    return false;
  }
  CeRows rows() {
    CeRows r;
    r.hidden = slice<u16>(base, ws.hidden_kept);
    r.hidden_stride = P.dim;
    r.kept = slice<int>(base, ws.kept);
    r.targets = P.targets;
    r.n_kept = n_kept;
    r.dim = P.dim;
    return r;
  }

  void forward() {
    int* count = slice<int>(base, ws.count);
    linear_ce_compact_rows_kernel<<<1, 1024>>>(
        P.targets, P.n_rows, kIgnore, slice<int>(base, ws.kept), slice<int>(base, ws.slot), count);
    int got = -1;  // the count sizes the grids; the planner used the host's count
    CK(cudaMemcpy(&got, count, 4, cudaMemcpyDeviceToHost));
    if (got != n_kept) fail("compaction count %d != %d", got, n_kept);
    if (n_kept == 0) return;
    linear_ce_gather_rows_kernel<<<n_kept, 128>>>(P.hidden, P.dim, slice<int>(base, ws.kept), P.dim,
                                                  slice<u16>(base, ws.hidden_kept));
    if (o.order != Order::Natural && !order_built) build_order();
    CeFwdParams p;
    p.layout = paused ? natural_layout() : layout;
    p.rows = rows();
    p.part_max = slice<float>(base, ws.part_max);
    p.part_sum = slice<float>(base, ws.part_sum);
    p.part_zsum = slice<float>(base, ws.part_zsum);
    p.target_logit = slice<float>(base, ws.target_logit);
    p.target_raw = slice<float>(base, ws.target_raw);
    p.tile_max = paused ? nullptr : slice<u16>(base, ws.tile_max);
    p.tiles_per_split = ws.tiles_per_split;
    const dim3 grid(ws.fwd_row_tiles, ws.splits);  // same grid; threads and stages differ
    static_assert(tilejit::kCeFwdTmaRows == kFwdRows && tilejit::kCeWeightTmaRows == kTileIds,
                  "the TMA boxes are the forward's tiles");
    CeFwdMaps maps{};  // the Hopper loop's tiles come by TMA, as in the runtime
    if (g_sm90_loop) {
      maps.hidden = encode_tensor_map(
          tilejit::ce_hidden_tensor_map_args(p.rows.hidden, n_kept, P.dim, false), "kept rows");
      for (int s = 0; s < p.layout.num_segments; ++s) {
        const CeSegment& seg = p.layout.seg[s];
        maps.weight[s] =
            encode_tensor_map(tilejit::ce_weight_tensor_map_args(seg.weight, seg.size, P.dim,
                                                                 seg.weight_stride, false),
                              "a segment's weights");
      }
      linear_ce_fwd_kernel<Prog, Args, false, true>
          <<<grid, CeFwdWsCta::kThreads, CeFwdWsCta::kSmemBytes>>>(args, p, maps);
    } else {
      linear_ce_fwd_kernel<Prog, Args, false, false>
          <<<grid, CeFwdCta::kThreads, CeFwdCta::kSmemBytes>>>(args, p, maps);
    }
    CeMergeParams q;
    q.part_max = p.part_max;
    q.part_sum = p.part_sum;
    q.part_zsum = p.part_zsum;
    q.target_logit = p.target_logit;
    q.slot = slice<int>(base, ws.slot);
    q.lse = slice<float>(base, ws.lse);
    q.row_loss = slice<float>(base, ws.row_loss);
    q.loss_rows = o.reduction == kReduceNone ? P.loss_rows : nullptr;
    q.n_rows = P.n_rows;
    q.n_kept = n_kept;
    q.splits = ws.splits;
    q.live_ids = layout.live_ids;
    q.label_smoothing = o.label_smoothing;
    q.z_loss = o.z_loss;
    linear_ce_merge_kernel<<<(P.n_rows + kMergeRows - 1) / kMergeRows, kMergeRows * kMergeWarps>>>(
        q);
    if (o.reduction != kReduceNone)
      linear_ce_reduce_kernel<<<1, 1024>>>(q.row_loss, n_kept, o.reduction, P.loss);
    CK(cudaGetLastError());
  }

  // The average-logit pre-pass on the kept rows, the host sort (runtime/VocabOrderPlan.h), and
  // the upload: what a forward with a fresh order pays. Needs the gathered rows.
  void build_order() {
    const int per = 512, parts = (n_kept + per - 1) / per, dx = (P.dim + 255) / 256;
    float* partial = order_scratch;
    float* hidden_sum = partial + int64_t(parts) * P.dim;
    float* scores = hidden_sum + P.dim;
    linear_ce_colsum_part_kernel<<<dim3(dx, parts), 256>>>(rows().hidden, P.dim, n_kept, nullptr,
                                                           nullptr, P.dim, per, 0, partial);
    linear_ce_sum_parts_kernel<<<dx, 256>>>(partial, parts, P.dim, hidden_sum);
    int64_t off = 0;
    for (auto& s : P.segs) {
      linear_ce_average_logit_kernel<<<(s.size + 7) / 8, 256>>>(
          s.weight, P.dim, s.bias, s.size, hidden_sum, 1.f / n_kept, P.dim, 0, scores + off);
      off += s.size;
    }
    std::vector<float> host = to_host(scores, size_t(off));
    off = 0;
    for (size_t s = 0; s < P.segs.size(); ++s) {
      std::vector<int32_t> ord = tilejit::order_by_score(host.data() + off, P.segs[s].size);
      std::vector<int32_t> rank = tilejit::inverse_order(ord);
      CK(cudaMemcpy(order_tables[2 * s], ord.data(), ord.size() * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(order_tables[2 * s + 1], rank.data(), rank.size() * 4, cudaMemcpyHostToDevice));
      layout.seg[s].order = order_tables[2 * s];
      layout.seg[s].rank = order_tables[2 * s + 1];
      off += P.segs[s].size;
    }
    order_built = true;
  }

  CeLayout natural_layout() const {
    CeLayout l = layout;
    for (int s = 0; s < l.num_segments; ++s) l.seg[s].order = l.seg[s].rank = nullptr;
    return l;
  }

  // Tile classes and visiting lists for `visit` (tile_max nullptr: every tile).
  void classify(CeBwdParams& p, const CeLayout& visit, const u16* tile_max) {
    CeClassifyParams c;
    c.layout = visit;
    c.kept = p.rows.kept;
    c.targets = P.targets;
    c.lse = slice<float>(base, ws.lse);
    c.tile_max = tile_max;
    c.tile_class = slice<unsigned char>(base, ws.tile_class);
    c.n_kept = n_kept;
    c.log_threshold = o.threshold > 0 ? logf(o.threshold) : 0.f;
    linear_ce_classify_kernel<<<dim3(ws.row_tiles, (layout.num_tiles + 63) / 64), 128>>>(c);
    p.layout = visit;
    p.tile_class = c.tile_class;
    p.row_list = slice<int>(base, ws.row_list);
    p.row_count = slice<int>(base, ws.row_count);
    p.col_list = slice<int>(base, ws.col_list);
    p.col_count = slice<int>(base, ws.col_count);
    p.col_steps = slice<int>(base, ws.col_steps);
    p.col_corrections = slice<int>(base, ws.col_corrections);
    linear_ce_row_lists_kernel<<<ws.row_tiles, 256>>>(c.tile_class, layout.num_tiles,
                                                      slice<int>(base, ws.row_list),
                                                      slice<int>(base, ws.row_count));
    p.pair_rank = slice<int>(base, ws.pair_rank);
    p.pair_first = slice<int>(base, ws.pair_first);
    p.staged_first = slice<int>(base, ws.staged_first);
    p.pair_list = slice<int2>(base, ws.pair_list);
    linear_ce_col_lists_kernel<<<(layout.num_tiles + 127) / 128, 128>>>(
        c.tile_class, layout.num_tiles, ws.row_tiles, slice<int>(base, ws.col_list),
        slice<int>(base, ws.col_count), slice<int>(base, ws.col_steps),
        slice<int>(base, ws.col_corrections), slice<int>(base, ws.pair_rank));
    linear_ce_pair_offsets_kernel<<<1, 1024>>>(visit, p.col_count, int(g_sm90_loop),
                                               slice<int>(base, ws.pair_first),
                                               slice<int>(base, ws.staged_first));
    linear_ce_pair_list_kernel<<<(layout.num_tiles + 127) / 128, 128>>>(
        p.col_list, p.col_count, p.pair_first, layout.num_tiles, ws.row_tiles,
        slice<int2>(base, ws.pair_list));
  }

  void backward() {
    CeBwdParams p;
    p.layout = layout;
    p.rows = rows();
    float* row_grad = slice<float>(base, ws.row_grad);
    linear_ce_row_grad_kernel<<<P.n_rows, 128>>>(slice<int>(base, ws.slot), upstream, o.reduction,
                                                 n_kept, row_grad, P.d_hidden, P.dim, P.dim);
    if (n_kept == 0) return;  // (weight gradients of an all-ignored batch: left to the caller)
    const u16* tile_max = paused ? nullptr : slice<u16>(base, ws.tile_max);
    classify(p, paused ? natural_layout() : layout, tile_max);
    surviving = o.threshold > 0 && !paused ? -1 : 1;
    kept_order = o.order != Order::Natural && !paused;
    // Each tile's visited row tiles (runtime/LinearCeBackward.cpp): read back when filtering.
    std::vector<int32_t> tile_pairs(layout.num_tiles, ws.row_tiles);
    if (tile_max) {  // runtime/LinearCe.cpp's choice
      tile_pairs = to_host(p.col_count, layout.num_tiles);
      int64_t v = 0;
      for (int c : tile_pairs) v += c;
      const int64_t total = int64_t(ws.row_tiles) * layout.num_tiles;
      surviving = tilejit::surviving_fraction(v, total);
      const bool filter = tilejit::filter_backward(v, total, o.order != Order::Natural);
      kept_order = o.order != Order::Natural && filter;
      if (!filter) {
        tile_max = nullptr;
        classify(p, natural_layout(), nullptr);
        std::fill(tile_pairs.begin(), tile_pairs.end(), ws.row_tiles);
      }
    }
    p.lse = slice<float>(base, ws.lse);
    p.target_logit = slice<float>(base, ws.target_logit);
    p.target_raw = slice<float>(base, ws.target_raw);
    p.row_grad = row_grad;
    p.d_hidden = P.d_hidden;
    p.d_hidden_stride = P.dim;
    p.num_row_tiles = ws.row_tiles;
    p.target_weight = 1.f - o.label_smoothing;
    p.uniform = o.label_smoothing / float(layout.live_ids);
    p.z_loss = o.z_loss;
    if (o.label_smoothing > 0 && Prog::kLogitIsIdentity) analytic_smoothing(p);
    if (tile_max) {  // some tiles may be skipped: targets there are sparse corrections
      p.target_grad = slice<float>(base, ws.target_grad);
      p.target_slot = slice<int>(base, ws.target_slot);
      linear_ce_target_grad_kernel<Prog, Args><<<(n_kept + 255) / 256, 256>>>(args, p);
    }
    // The chunks (runtime/LinearCeBackward.cpp): G's blocks and the staged weight tiles of
    // ordered segments' visited tiles on the Hopper products.
    std::vector<uint8_t> staged_tile(layout.num_tiles, 0);
    for (int s = 0; s < p.layout.num_segments; ++s) {
      const CeSegment& seg = p.layout.seg[s];
      if (!g_sm90_loop || !seg.order) continue;
      for (int t = seg.first_tile; t < seg.first_tile + (seg.size + kTileIds - 1) / kTileIds; ++t)
        staged_tile[t] = tile_pairs[t] > 0;
    }
    const tilejit::CeBackwardPlan plan =
        tilejit::plan_backward_chunks(tile_pairs, staged_tile, P.dim, o.grad_buffer_bytes);
    if (plan.buffer_bytes > grad_capacity) {
      cudaFree(grad_buffer);
      CK(cudaMalloc(&grad_buffer, plan.buffer_bytes));
      grad_capacity = plan.buffer_bytes;
    }
    p.grad = reinterpret_cast<u16*>(grad_buffer);
    CeBwdMaps maps{};  // the Hopper gradient tiles and products: TMA, as in the runtime
    const int rows = tilejit::kCeProductTmaRows;
    if (g_sm90_loop) {
      maps.grad = encode_tensor_map(tilejit::ce_operand_tensor_map_args(
                                        p.grad, std::max<int64_t>(plan.max_pairs, 1) * kTileRows,
                                        kTileIds, kTileIds, rows, false),
                                    "G's blocks");
      maps.hidden = encode_tensor_map(
          tilejit::ce_operand_tensor_map_args(p.rows.hidden, n_kept, P.dim, P.dim, rows, false),
          "kept rows");
      for (int s = 0; s < p.layout.num_segments; ++s)
        maps.weight[s] = encode_tensor_map(
            tilejit::ce_operand_tensor_map_args(p.layout.seg[s].weight, p.layout.seg[s].size, P.dim,
                                                p.layout.seg[s].weight_stride, rows, false),
            "a segment's weights");
    }
    for (size_t ci = 0; ci < plan.chunks.size(); ++ci) {
      const tilejit::CeBackwardChunk& ch = plan.chunks[ci];
      p.chunk_first = ch.first_tile;
      p.chunk_tiles = ch.tiles;
      p.first_chunk = ci == 0;
      const int dtiles = (P.dim + CeProductCta::kN - 1) / CeProductCta::kN;
      const dim3 dhidden_grid(dtiles, ws.row_tiles), dweight_grid(dtiles, p.chunk_tiles);
      const int threads = CeProductCta::kThreads, bytes = CeProductCta::kSmemBytes;
      const bool grad = ch.pairs > 0, dhidden = grad || p.first_chunk;
      if (ch.staged_tiles > 0) {  // before the gradient tiles and dE, which read it
        u16* staged = reinterpret_cast<u16*>(grad_buffer + ch.pairs * plan.kGradBlockBytes);
        maps.staged =
            encode_tensor_map(tilejit::ce_operand_tensor_map_args(
                                  staged, ch.staged_tiles * kTileIds, P.dim, P.dim, rows, false),
                              "the staged weight rows");
        linear_ce_stage_weights_kernel<<<dim3(p.chunk_tiles, kTileIds / 8), 256>>>(
            p.layout, p.col_count, p.staged_first, p.chunk_first, P.dim, staged);
      }
      if (g_sm90_loop) {
        const int ws_threads = CeProductWsCta::kThreads, ws_bytes = CeProductWsCta::kSmemBytes;
        if (grad)  // persistent: at most one CTA per SM
          linear_ce_grad_kernel<Prog, Args, false, true>
              <<<unsigned(std::min<int64_t>(ch.pairs, num_sms)), CeGradPingpongCta::kThreads,
                 CeGradPingpongCta::kSmemBytes>>>(args, p, maps);
        // persistent: a few CTAs, so that each takes many items and its ring wraps across them
        if (dhidden)
          linear_ce_dhidden_kernel<false, true>
              <<<unsigned(std::min(dtiles * ws.row_tiles, 7)), ws_threads, ws_bytes>>>(p, maps);
        const unsigned dweight_ctas = unsigned(std::min(dtiles * p.chunk_tiles, 5));
        linear_ce_dweight_kernel<false, true><<<dweight_ctas, ws_threads, ws_bytes>>>(p, maps);
      } else {
        if (grad)
          linear_ce_grad_kernel<Prog, Args, false, false>
              <<<unsigned(ch.pairs), CeGradCta::kThreads, CeGradCta::kSmemBytes>>>(args, p, maps);
        if (dhidden)
          linear_ce_dhidden_kernel<false, false><<<dhidden_grid, threads, bytes>>>(p, maps);
        linear_ce_dweight_kernel<false, false><<<dweight_grid, threads, bytes>>>(p, maps);
      }
      // the tiles no row tile visits
      linear_ce_dweight_cold_kernel<false>
          <<<dim3((P.dim + CeColdCta::kN - 1) / CeColdCta::kN, p.chunk_tiles), CeColdCta::kThreads,
             CeColdCta::kSmemBytes>>>(p);
      if (has_bias())
        linear_ce_dbias_kernel<false><<<(p.chunk_tiles * kTileIds + 255) / 256, 256>>>(p);
    }
    CK(cudaGetLastError());
  }

  // sum_v C_v over every live id, sum_r g_r E_r over kept rows, sum_r g_r.
  void analytic_smoothing(CeBwdParams& p) {
    float* partial = slice<float>(base, ws.colsum_partial);
    const int per = int(ws.colsum_rows_per_part), dx = (P.dim + 255) / 256;
    int parts = 0;
    for (auto& s : P.segs) {
      int n = (s.size + per - 1) / per;
      linear_ce_colsum_part_kernel<<<dim3(dx, n), 256>>>(s.weight, P.dim, s.size, nullptr, nullptr,
                                                         P.dim, per, 0,
                                                         partial + (int64_t)parts * P.dim);
      parts += n;
    }
    float* colsum = slice<float>(base, ws.weight_colsum);
    linear_ce_sum_parts_kernel<<<dx, 256>>>(partial, parts, P.dim, colsum);
    int n = (n_kept + per - 1) / per;
    float* rows_part = partial + (int64_t)parts * P.dim;
    linear_ce_colsum_part_kernel<<<dim3(dx, n), 256>>>(p.rows.hidden, P.dim, n_kept, nullptr,
                                                       p.row_grad, P.dim, per, 0, rows_part);
    float* wsum = slice<float>(base, ws.hidden_wsum);
    linear_ce_sum_parts_kernel<<<dx, 256>>>(rows_part, n, P.dim, wsum);
    float* gsum = slice<float>(base, ws.grad_sum);
    linear_ce_reduce_kernel<<<1, 1024>>>(p.row_grad, n_kept, kReduceSum, gsum);
    p.weight_colsum = colsum;
    p.hidden_wsum = wsum;
    p.grad_sum = gsum;
  }

  // Fractions of (row tile, vocabulary tile) pairs the last backward visited (hot) and that
  // hold only targets (applied as sparse corrections, not visited), and of their 64-row halves
  // that it computed.
  struct TileFractions {
    double hot, tgt, halves;
  };
  TileFractions tile_fractions() {
    std::vector<unsigned char> cls(size_t(ws.row_tiles) * layout.num_tiles);
    CK(cudaMemcpy(cls.data(), base + ws.tile_class.offset, cls.size(), cudaMemcpyDeviceToHost));
    double hot = 0, tgt = 0, halves = 0;
    for (unsigned char c : cls) {
      hot += (c & kTileHot) != 0, tgt += c == kTileHoldsTarget;
      halves += __builtin_popcount((c >> kHalfShift) & kAllHalves);
    }
    return {hot / cls.size(), tgt / cls.size(), halves / (kHalves * double(cls.size()))};
  }
};

// Runs fn with the problem's logit program.
template <class Fn>
void with_program(const Options& o, Fn fn) {
  if (o.cap > 0)
    fn(SoftcapLogit{}, CapArgs{o.cap, 1.f / o.cap});
  else
    fn(IdentityLogit{}, NoArgs{0});
}

#include "tests/gpu/linear_ce_harness_cases.cuh"

int main(int argc, char** argv) {
  // --check-only: correctness only; --only CASE: timing of one case only (for profilers);
  // --kinds zipf,flat,peaked: data kinds to time; --loop portable|sm90: the tile loop of the
  // forward, gradient and product kernels (default: TILEJIT_CE_LOOP, else sm90); a plain argument
  // (an output directory, as bench/gpu_check.sh passes) is accepted and unused: results go to
  // stdout.
  bool check_only = false;
  std::string only;
  std::vector<std::string> kinds = {"zipf", "flat", "peaked"};
  auto set_loop = [&](const std::string& name) {
    if (name != "portable" && name != "sm90")
      fail("--loop: want portable or sm90, not '%s'", name.c_str());
    g_sm90_loop = name == "sm90";
  };
  if (const char* env = std::getenv("TILEJIT_CE_LOOP")) set_loop(env);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--check-only") {
      check_only = true;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--loop" && i + 1 < argc) {
      set_loop(argv[++i]);
    } else if (a == "--kinds" && i + 1 < argc) {
      kinds.clear();
      std::string list = argv[++i];
      for (size_t b = 0, e; b <= list.size(); b = e + 1) {
        e = std::min(list.find(',', b), list.size());
        kinds.push_back(list.substr(b, e - b));
      }
      for (const std::string& k : kinds) {
        DataSpec probe;
        data_kind(probe, k);  // fails on an unknown kind
      }
    } else if (a.empty() || a[0] == '-') {
      fail(
          "usage: %s [OUTDIR] [--check-only | --only CASE] [--kinds zipf,flat,peaked] "
          "[--loop portable|sm90]",
          argv[0]);
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; tile loop: %s\n", prop.name, prop.multiProcessorCount,
              loop_name());
  if (g_sm90_loop && prop.major != 9) fail("--loop sm90 needs an sm_90a device");
  int failures = only.empty() ? run_checks() : 0;
  if (!check_only) run_timings(only, kinds);
  std::printf("%s: %d check failure(s)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
