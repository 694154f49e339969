#include "runtime/MaskAnalysis.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "compiler/BufferSummary.h"
#include "compiler/Error.h"
#include "compiler/IntervalEval.h"
#include "kernels_templates/row_bisection.cuh"

namespace tilejit {

namespace {

struct Geometry {
  BlockMaskShape shape;  // the mask's extents
  int q_tiles = 0, kv_tiles = 0;
  int64_t batch_hi = 0, heads_hi = 0;  // b and h range over a list that broadcasts them

  explicit Geometry(const BlockMaskShape& s, const BlockMaskShape& tensors) : shape(s) {
    q_tiles = s.seq_q <= 0 ? 0 : (s.seq_q + s.block_q - 1) / s.block_q;
    kv_tiles = s.seq_kv <= 0 ? 0 : (s.seq_kv + s.block_kv - 1) / s.block_kv;
    batch_hi = tensors.batch - 1;
    heads_hi = tensors.heads - 1;
  }
  int64_t q_end(int qt) const {
    return std::min<int64_t>(int64_t{qt + 1} * shape.block_q, shape.seq_q);
  }
  int64_t kv_end(int kt) const {
    return std::min<int64_t>(int64_t{kt + 1} * shape.block_kv, shape.seq_kv);
  }
  // The in-range box of list (b, h), q tile qt and kv tiles [k0, k1].
  IndexBox box(int b, int h, int qt, int k0, int k1) const {
    IndexBox x;
    x.lo[0] = b;
    x.hi[0] = shape.batch == 1 ? batch_hi : b;
    x.lo[1] = h;
    x.hi[1] = shape.heads == 1 ? heads_hi : h;
    x.lo[2] = int64_t{qt} * shape.block_q;
    x.hi[2] = q_end(qt) - 1;
    x.lo[3] = int64_t{k0} * shape.block_kv;
    x.hi[3] = kv_end(k1) - 1;
    return x;
  }
};

// Elementwise class of one tile, stopping as soon as both kinds of element were seen.
TileClass brute_force_tile(const CompiledEval& eval, const Geometry& g, int b, int h, int qt,
                           int kt) {
  // A broadcast axis is one the mask does not read: any value of it stands for all.
  bool any = false, all = true;
  for (int64_t bi = b; bi <= b; ++bi)
    for (int64_t hi = h; hi <= h; ++hi)
      for (int64_t q = int64_t{qt} * g.shape.block_q; q < g.q_end(qt); ++q)
        for (int64_t kv = int64_t{kt} * g.shape.block_kv; kv < g.kv_end(kt); ++kv) {
          bool keep = eval.eval_mask(bi, hi, q, kv);
          any |= keep;
          all &= keep;
          if (any && !all) return TileClass::Partial;
        }
  return !any ? TileClass::Empty : all ? TileClass::Full : TileClass::Partial;
}

static_assert(static_cast<int>(Tri::False) == tjk::kTjFalse &&
              static_cast<int>(Tri::True) == tjk::kTjTrue &&
              static_cast<int>(Tri::Maybe) == tjk::kTjMaybe);
static_assert(static_cast<int>(TileClass::Empty) == tjk::kTjEmpty &&
              static_cast<int>(TileClass::Partial) == tjk::kTjPartial &&
              static_cast<int>(TileClass::Full) == tjk::kTjFull);

// Appends the bisection's runs to a row's list, merging adjacent runs of one kind.
struct RunAppender {
  std::vector<TileRun>& runs;

  void add(int first, int count, bool full) {
    if (!runs.empty()) {
      TileRun& last = runs.back();
      if (last.full() == full && last.first + last.count() == first) {
        last = TileRun::make(last.first, last.count() + count, full);
        return;
      }
    }
    runs.push_back(TileRun::make(first, count, full));
  }
};

// Classifies the rows of one thread: bisection over the kv tiles of each row, the GPU's
// algorithm (kernels_templates/row_bisection.cuh).
class RowClassifier {
 public:
  RowClassifier(const Expr& mask, const EvalContext& bindings, const Geometry& g,
                const std::map<std::string, BufferSummary, std::less<>>& summaries,
                const CompiledEval* refine)
      : eval_(mask, bindings.params), oracle_(eval_, summaries), g_(g), refine_(refine) {}

  void row(int b, int h, int qt, std::vector<TileRun>& out) {
    auto eval = [&](int k0, int k1) {
      return static_cast<tjk::TjTri>(eval_.eval(g_.box(b, h, qt, k0, k1), &oracle_));
    };
    auto leaf = [&](int kt) -> int {
      if (refine_ == nullptr) return tjk::kTjPartial;
      ++refined;
      return static_cast<int>(brute_force_tile(*refine_, g_, b, h, qt, kt));
    };
    RunAppender appender{out};
    evaluations += tjk::tj_bisect_row(g_.kv_tiles, eval, leaf, appender);
  }
  int64_t evaluations = 0, refined = 0;

 private:
  IntervalEval eval_;
  SummaryOracle oracle_;
  const Geometry& g_;
  const CompiledEval* refine_;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int thread_count(int requested, size_t work) {
  int n = requested > 0 ? requested
                        : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::min<size_t>(static_cast<size_t>(n), std::max<size_t>(work / 16, 1)));
}

}  // namespace

BlockMaskShape mask_extents(const Expr& mask, BlockMaskShape shape) {
  if (!ir::uses_var(mask, var::b)) shape.batch = 1;
  if (!ir::uses_var(mask, var::h)) shape.heads = 1;
  return shape;
}

BlockMask analyse_block_mask(const Expr& mask, const EvalContext& bindings,
                             const BlockMaskShape& shape, const AnalysisOptions& options,
                             AnalysisStats* stats) {
  auto t0 = std::chrono::steady_clock::now();
  BlockMaskShape ext = mask_extents(mask, shape);
  Geometry g(ext, shape);
  IntervalEval probe(mask, bindings.params);
  std::map<std::string, BufferSummary, std::less<>> summaries;
  size_t summary_bytes = 0;
  for (const auto& [name, plan] : plan_buffer_summaries(probe, shape.block_q, shape.block_kv)) {
    auto it = bindings.buffers.find(name);
    TILEJIT_USER_CHECK(it != bindings.buffers.end(), "no buffer bound for '{}'", name);
    auto [pos, _] = summaries.emplace(name, BufferSummary(it->second, plan));
    summary_bytes += pos->second.bytes();
  }
  double summary_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  std::unique_ptr<CompiledEval> refine;
  if (options.refine_partial) refine = std::make_unique<CompiledEval>(mask, bindings);

  size_t n_rows = static_cast<size_t>(ext.batch) * ext.heads * g.q_tiles;
  std::vector<std::vector<TileRun>> rows(n_rows);
  std::atomic<size_t> next{0};
  std::atomic<int64_t> evaluations{0}, refined{0};
  auto worker = [&] {
    RowClassifier rc(mask, bindings, g, summaries, refine.get());
    constexpr size_t kChunk = 64;
    for (size_t start; (start = next.fetch_add(kChunk)) < n_rows;)
      for (size_t r = start; r < std::min(n_rows, start + kChunk); ++r) {
        int qt = static_cast<int>(r % g.q_tiles);
        int list = static_cast<int>(r / g.q_tiles);
        rc.row(list / ext.heads, list % ext.heads, qt, rows[r]);
      }
    evaluations += rc.evaluations;
    refined += rc.refined;
  };
  int n_threads = thread_count(options.threads, n_rows);
  if (n_threads <= 1) {
    worker();
  } else {
    std::vector<std::thread> threads;
    for (int t = 0; t < n_threads; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
  }
  double classify_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  BlockMask mask_out = BlockMask::from_rows(ext, rows);
  if (stats != nullptr) {
    stats->box_evaluations = evaluations;
    stats->refined_tiles = refined;
    stats->summary_bytes = summary_bytes;
    stats->summary_seconds = summary_seconds;
    stats->classify_seconds = classify_seconds;
    stats->build_seconds = seconds_since(t0);
  }
  return mask_out;
}

BlockMask reference_block_mask(const Expr& mask, const EvalContext& bindings,
                               const BlockMaskShape& shape) {
  BlockMaskShape ext = mask_extents(mask, shape);
  Geometry g(ext, shape);
  CompiledEval eval(mask, bindings);
  return BlockMask::from_classifier(
      ext, [&](int b, int h, int qt, int kt) { return brute_force_tile(eval, g, b, h, qt, kt); });
}

EvalContext host_eval_context(const AttentionProgram& program, const Bindings& host_bindings) {
  check_bindings(program, host_bindings, TensorView::Where::Host);
  EvalContext ctx;
  for (const BufferDecl& decl : program.buffers) {
    const TensorView* t = host_bindings.find_buffer(decl.name);
    ctx.buffers[decl.name] = BufferView{t->data, decl.elem, t->shape, t->strides};
  }
  for (const ParamDecl& decl : program.params) {
    const ScalarValue* v = host_bindings.find_param(decl.name);
    if (const int32_t* i = std::get_if<int32_t>(v))
      ctx.params[decl.name] = int64_t{*i};
    else
      ctx.params[decl.name] = static_cast<double>(std::get<float>(*v));
  }
  return ctx;
}

BlockMask analyse_block_mask(const LoweredAttention& lowered, const Bindings& host_bindings,
                             const BlockMaskShape& shape, const AnalysisOptions& options,
                             AnalysisStats* stats) {
  EvalContext ctx = host_eval_context(lowered.program, host_bindings);
  return analyse_block_mask(lowered.program.mask, ctx, shape, options, stats);
}

BlockMask reference_block_mask(const LoweredAttention& lowered, const Bindings& host_bindings,
                               const BlockMaskShape& shape) {
  EvalContext ctx = host_eval_context(lowered.program, host_bindings);
  return reference_block_mask(lowered.program.mask, ctx, shape);
}

}  // namespace tilejit
