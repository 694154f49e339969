#include "runtime/MaskAnalysisGpu.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <limits>

#include "compiler/BufferSummary.h"
#include "compiler/Error.h"
#include "compiler/IntervalEval.h"
#include "compiler/codegen/IntervalCodegen.h"
#include "kernels_templates/Embedded.h"
#include "kernels_templates/range_table.cuh"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Launch.h"
#include "runtime/MaskAnalysis.h"
#include "runtime/Module.h"
#include "runtime/RunCompaction.h"

namespace tilejit {

namespace {

// Mirrors tjk::SummariseParams in kernels_templates/classify_tiles.cuh.
struct SummariseParams {
  void* mn;
  void* mx;
  long long rows, blocks;
  int32_t axis, granule;
};
static_assert(sizeof(SummariseParams) == 40);

// Mirrors tjk::SummaryLevelParams.
struct SummaryLevelParams {
  void* mn;
  void* mx;
  long long rows, blocks;
  int32_t level, unused;
};
static_assert(sizeof(SummaryLevelParams) == 40);

// Mirrors tjk::ClassifyRowsParams.
struct ClassifyRowsParams {
  void* slots;
  void* counts;
  void* offsets;
  void* runs;
  int32_t rows, capacity, pass, heads, seq_q, seq_kv, block_q, block_kv, q_tiles, kv_tiles;
};
static_assert(sizeof(ClassifyRowsParams) == 72);
static_assert(sizeof(TileRun) == 8 && offsetof(TileRun, count_kind) == 4,
              "tjk::TjRun mirrors TileRun");

constexpr unsigned kThreads = 256;
// Rows are few (q tiles x lists) and each does a long bisection: small blocks spread them over
// every SM.
constexpr unsigned kRowThreads = 64;
// Runs a row keeps from pass 1; rows with more are classified again in pass 2. 8 covers the
// standard masks (causal 2, windows and documents up to 5).
constexpr int kSlotRuns = 8;
// Bound on the slots' memory: with very many rows the capacity shrinks, down to 0 (every row
// classified twice, counts then runs).
constexpr long long kMaxSlotBytes = 64ll << 20;
// Bound on a range table (levels x rows x blocks doubles, twice): coarser blocks are sound, only
// less precise for tiles smaller than a block.
constexpr long long kMaxSummaryCells = 1ll << 23;

KernelSpec classify_spec(const ClassifySource& src, const std::string& program) {
  KernelSpec spec;
  spec.program_name = program;
  spec.source = src.cuda.source;
  for (const std::string& h : src.cuda.headers)
    spec.headers.emplace_back(h, std::string(embedded_template(h)));
  spec.options = {"-std=c++17"};
  spec.entry_points = {src.cuda.entry};
  spec.entry_points.insert(spec.entry_points.end(), src.summarise_entries.begin(),
                           src.summarise_entries.end());
  if (!src.summary_level_entry.empty()) spec.entry_points.push_back(src.summary_level_entry);
  spec.variant = "classify_tiles";
  return spec;
}

unsigned blocks_for(long long n, unsigned threads = kThreads) {
  return static_cast<unsigned>(std::min<long long>((n + threads - 1) / threads, 1 << 20));
}

// The extent of one buffer's range table.
struct SummaryExtent {
  long long rows = 0, blocks = 0;
  int granule = 1, levels = 1;
  size_t cells() const { return static_cast<size_t>(std::max(levels * rows * blocks, 1ll)); }
};

SummaryExtent summary_extent(const TensorView& t, const SummaryPlan& plan) {
  long long len = t.rank() == 0 ? 1 : t.shape[plan.axis];
  SummaryExtent e;
  e.rows = t.rank() == 0 ? 1 : (len == 0 ? 0 : t.numel() / len);
  e.granule = std::max(plan.granule, 1);
  for (;;) {
    e.blocks = (len + e.granule - 1) / e.granule;
    e.levels = tjk::tj_range_levels(e.blocks);
    if (e.blocks <= 1 || e.levels * e.rows * e.blocks <= kMaxSummaryCells) return e;
    e.granule *= 2;
  }
}

// Appends one tjk::TjSummary<rank> to the TjSummaries bytes (8-byte aligned members).
void put_summary(std::vector<unsigned char>& bytes, CUdeviceptr mn, CUdeviceptr mx,
                 const std::vector<int64_t>& sizes, const SummaryExtent& e, int axis) {
  auto put = [&](const auto& v) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  };
  put(mn);
  put(mx);
  for (size_t d = 0; d < std::max<size_t>(sizes.size(), 1); ++d)
    put(static_cast<long long>(d < sizes.size() ? sizes[d] : 0));
  put(e.rows);
  put(e.blocks);
  put(static_cast<int32_t>(axis));
  put(static_cast<int32_t>(e.granule));
  put(static_cast<int32_t>(e.levels));
  put(int32_t{0});
  put(-std::numeric_limits<double>::infinity());  // all_min / all_max: unknown, always sound
  put(std::numeric_limits<double>::infinity());
}

// Range tables of the buffers the mask reads, built on `stream` into `storage`; returns the
// TjSummaries bytes. O(elements + blocks log blocks) per buffer.
std::vector<unsigned char> build_summaries(const AttentionProgram& prog, const ClassifySource& src,
                                           const Bindings& device_bindings,
                                           const BlockMaskShape& shape, LoadedModule& module,
                                           std::vector<unsigned char>& args,
                                           std::vector<DeviceBuffer>& storage, CUstream stream) {
  // Planned as the CPU plans them (the params only name the plan's inputs).
  std::map<std::string, ParamValue, std::less<>> params;
  for (const auto& [name, v] : device_bindings.params())
    params[name] = std::holds_alternative<int32_t>(v) ? ParamValue(int64_t{std::get<int32_t>(v)})
                                                      : ParamValue(double{std::get<float>(v)});
  auto plans =
      plan_buffer_summaries(IntervalEval(prog.mask, params), shape.block_q, shape.block_kv);
  std::vector<unsigned char> summaries;
  for (size_t k = 0; k < src.summarised_buffers.size(); ++k) {
    const std::string& name = src.summarised_buffers[k];
    const TensorView* t = device_bindings.find_buffer(name);
    SummaryPlan plan = plans.at(name);
    SummaryExtent e = summary_extent(*t, plan);
    storage.emplace_back(e.cells() * sizeof(double));
    storage.emplace_back(e.cells() * sizeof(double));
    CUdeviceptr mn = storage[storage.size() - 2].ptr(), mx = storage.back().ptr();
    put_summary(summaries, mn, mx, t->shape, e, plan.axis);
    long long entries = e.rows * e.blocks;
    if (entries == 0) continue;
    SummariseParams sp{reinterpret_cast<void*>(mn),
                       reinterpret_cast<void*>(mx),
                       e.rows,
                       e.blocks,
                       plan.axis,
                       e.granule};
    void* kp[] = {&sp, args.data()};
    launch(module.function(src.summarise_entries[k]), Dim3{blocks_for(entries), 1, 1},
           Dim3{kThreads, 1, 1}, 0, stream, kp);
    for (int level = 1; level < e.levels; ++level) {
      SummaryLevelParams lp{
          reinterpret_cast<void*>(mn), reinterpret_cast<void*>(mx), e.rows, e.blocks, level, 0};
      void* lkp[] = {&lp};
      launch(module.function(src.summary_level_entry), Dim3{blocks_for(entries), 1, 1},
             Dim3{kThreads, 1, 1}, 0, stream, lkp);
    }
  }
  if (summaries.empty()) summaries.push_back(0);  // an empty struct is one byte
  return summaries;
}

}  // namespace

BlockMask analyse_block_mask_gpu(const LoweredAttention& lowered, const Bindings& device_bindings,
                                 const BlockMaskShape& shape, CUstream stream) {
  const AttentionProgram& prog = lowered.program;
  check_bindings(prog, device_bindings);
  Driver* driver = Driver::get();
  TILEJIT_USER_CHECK(driver, "analyse_block_mask_gpu: no GPU: {}", Driver::unavailable_reason());
  driver->ensure_context();

  BlockMaskShape ext = mask_extents(prog.mask, shape);
  long long q_tiles = ext.seq_q <= 0 ? 0 : (ext.seq_q + ext.block_q - 1) / ext.block_q;
  int kv_tiles = ext.seq_kv <= 0 ? 0 : (ext.seq_kv + ext.block_kv - 1) / ext.block_kv;
  long long n_rows = static_cast<long long>(ext.batch) * ext.heads * q_tiles;
  TILEJIT_USER_CHECK(n_rows < INT_MAX,
                     "analyse_block_mask_gpu: program '{}': {} q-tile rows "
                     "exceed the block mask's int32 offsets",
                     prog.name, n_rows);
  std::vector<int32_t> counts(static_cast<size_t>(n_rows), 0);
  if (n_rows == 0 || kv_tiles == 0)
    return BlockMask::from_rows(ext, split_rows(run_offsets(counts, prog.name), {}));

  ClassifySource src = generate_classify_tiles(prog);
  auto kernel = KernelCache::global().get(classify_spec(src, prog.name), device_arch(0));
  std::shared_ptr<LoadedModule> module = load_module(*kernel);
  std::vector<unsigned char> args = pack_args(src.cuda.layout, device_bindings);
  std::vector<DeviceBuffer> storage;
  std::vector<unsigned char> summaries =
      build_summaries(prog, src, device_bindings, shape, *module, args, storage, stream);

  // Pass 1: each row's run count, and its first `capacity` runs in its slot.
  int capacity =
      static_cast<int>(std::min<long long>(kSlotRuns, kMaxSlotBytes / (n_rows * sizeof(TileRun))));
  DeviceBuffer slots(static_cast<size_t>(n_rows) * capacity * sizeof(TileRun));
  DeviceBuffer row_counts(counts.size() * sizeof(int32_t));
  ClassifyRowsParams cp{slots.data(),
                        row_counts.data(),
                        nullptr,
                        nullptr,
                        static_cast<int32_t>(n_rows),
                        capacity,
                        1,
                        ext.heads,
                        ext.seq_q,
                        ext.seq_kv,
                        ext.block_q,
                        ext.block_kv,
                        static_cast<int32_t>(q_tiles),
                        kv_tiles};
  void* kp[] = {&cp, args.data(), summaries.data()};
  CUfunction classify = module->function(src.cuda.entry);
  Dim3 grid{blocks_for(n_rows, kRowThreads), 1, 1}, block{kRowThreads, 1, 1};
  // Every copy is ordered on `stream` and only `stream` is waited for: work the caller queued on
  // other streams keeps running (the runs come back to the host, so the host waits for these).
  launch(classify, grid, block, 0, stream, kp);
  driver->memcpy_dtoh_async(counts.data(), row_counts.ptr(), counts.size() * sizeof(int32_t),
                            stream);
  driver->stream_synchronize(stream);

  // Pass 2: every row's runs at its offset; only O(runs) bytes come back.
  std::vector<int32_t> offsets = run_offsets(counts, prog.name);
  std::vector<TileRun> runs(static_cast<size_t>(offsets.back()));
  if (!runs.empty()) {
    DeviceBuffer row_offsets(offsets.size() * sizeof(int32_t));
    DeviceBuffer out(runs.size() * sizeof(TileRun));
    driver->memcpy_htod_async(row_offsets.ptr(), offsets.data(), row_offsets.bytes(), stream);
    cp.offsets = row_offsets.data();
    cp.runs = out.data();
    cp.pass = 2;
    launch(classify, grid, block, 0, stream, kp);
    driver->memcpy_dtoh_async(runs.data(), out.ptr(), runs.size() * sizeof(TileRun), stream);
    driver->stream_synchronize(stream);
  }
  return BlockMask::from_rows(ext, split_rows(offsets, runs));
}

}  // namespace tilejit
