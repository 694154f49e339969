#include "runtime/MaskAnalysisGpu.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "compiler/BufferSummary.h"
#include "compiler/Error.h"
#include "compiler/IntervalEval.h"
#include "compiler/codegen/IntervalCodegen.h"
#include "kernels_templates/Embedded.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Launch.h"
#include "runtime/MaskAnalysis.h"
#include "runtime/Module.h"

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

// Mirrors tjk::ClassifyTilesParams.
struct ClassifyTilesParams {
  void* classes;
  int32_t batch, heads, seq_q, seq_kv, block_q, block_kv, q_tiles, kv_tiles;
};
static_assert(sizeof(ClassifyTilesParams) == 40);

constexpr unsigned kThreads = 256;

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
  spec.variant = "classify_tiles";
  return spec;
}

// Appends one tjk::TjSummary<rank> to the TjSummaries bytes (8-byte aligned members).
void put_summary(std::vector<unsigned char>& bytes, CUdeviceptr mn, CUdeviceptr mx,
                 const std::vector<int64_t>& sizes, long long blocks, int axis, int granule) {
  auto put = [&](const auto& v) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  };
  put(mn);
  put(mx);
  for (size_t d = 0; d < std::max<size_t>(sizes.size(), 1); ++d)
    put(static_cast<long long>(d < sizes.size() ? sizes[d] : 0));
  put(blocks);
  put(static_cast<int32_t>(axis));
  put(static_cast<int32_t>(granule));
  put(-std::numeric_limits<double>::infinity());  // all_min / all_max: unknown, always sound
  put(std::numeric_limits<double>::infinity());
}

unsigned blocks_for(long long n) {
  return static_cast<unsigned>(std::min<long long>((n + kThreads - 1) / kThreads, 1 << 20));
}

}  // namespace

BlockMask analyse_block_mask_gpu(const LoweredAttention& lowered, const Bindings& device_bindings,
                                 const BlockMaskShape& shape, CUstream stream) {
  const AttentionProgram& prog = lowered.program;
  check_bindings(prog, device_bindings);
  Driver* driver = Driver::get();
  TILEJIT_USER_CHECK(driver, "analyse_block_mask_gpu: no GPU: {}", Driver::unavailable_reason());
  driver->ensure_context();

  ClassifySource src = generate_classify_tiles(prog);
  auto kernel = KernelCache::global().get(classify_spec(src, prog.name), device_arch(0));
  std::shared_ptr<LoadedModule> module = load_module(*kernel);
  std::vector<unsigned char> args = pack_args(src.cuda.layout, device_bindings);

  // Summaries, planned as the CPU plans them (the params only name the plan's inputs).
  std::map<std::string, ParamValue, std::less<>> params;
  for (const auto& [name, v] : device_bindings.params())
    params[name] = std::holds_alternative<int32_t>(v) ? ParamValue(int64_t{std::get<int32_t>(v)})
                                                      : ParamValue(double{std::get<float>(v)});
  auto plans =
      plan_buffer_summaries(IntervalEval(prog.mask, params), shape.block_q, shape.block_kv);
  std::vector<DeviceBuffer> storage;
  std::vector<unsigned char> summaries;
  for (size_t k = 0; k < src.summarised_buffers.size(); ++k) {
    const std::string& name = src.summarised_buffers[k];
    const TensorView* t = device_bindings.find_buffer(name);
    SummaryPlan plan = plans.at(name);
    long long len = t->rank() == 0 ? 1 : t->shape[plan.axis];
    long long rows = t->rank() == 0 ? 1 : (len == 0 ? 0 : t->numel() / len);
    long long blocks = (len + plan.granule - 1) / plan.granule;
    size_t cells = static_cast<size_t>(std::max<long long>(rows * blocks, 1));
    storage.emplace_back(cells * sizeof(double));
    storage.emplace_back(cells * sizeof(double));
    CUdeviceptr mn = storage[storage.size() - 2].ptr(), mx = storage.back().ptr();
    put_summary(summaries, mn, mx, t->shape, blocks, plan.axis, plan.granule);
    if (rows * blocks == 0) continue;
    SummariseParams sp{reinterpret_cast<void*>(mn),
                       reinterpret_cast<void*>(mx),
                       rows,
                       blocks,
                       plan.axis,
                       plan.granule};
    void* kp[] = {&sp, args.data()};
    launch(module->function(src.summarise_entries[k]), Dim3{blocks_for(rows * blocks), 1, 1},
           Dim3{kThreads, 1, 1}, 0, stream, kp);
  }
  if (summaries.empty()) summaries.push_back(0);  // an empty struct is one byte

  BlockMaskShape ext = mask_extents(prog.mask, shape);
  int q_tiles = ext.seq_q <= 0 ? 0 : (ext.seq_q + ext.block_q - 1) / ext.block_q;
  int kv_tiles = ext.seq_kv <= 0 ? 0 : (ext.seq_kv + ext.block_kv - 1) / ext.block_kv;
  long long total = static_cast<long long>(ext.batch) * ext.heads * q_tiles * kv_tiles;
  std::vector<unsigned char> classes(static_cast<size_t>(total));
  if (total > 0) {
    DeviceBuffer out(static_cast<size_t>(total));
    ClassifyTilesParams cp{out.data(),  ext.batch,    ext.heads, ext.seq_q, ext.seq_kv,
                           ext.block_q, ext.block_kv, q_tiles,   kv_tiles};
    void* kp[] = {&cp, args.data(), summaries.data()};
    launch(module->function(src.cuda.entry), Dim3{blocks_for(total), 1, 1}, Dim3{kThreads, 1, 1}, 0,
           stream, kp);
    driver->context_synchronize();
    out.copy_to_host(classes.data(), classes.size());
  }
  std::vector<TileClass> tile_classes(classes.size());
  for (size_t i = 0; i < classes.size(); ++i)
    tile_classes[i] = classes[i] == 2   ? TileClass::Full
                      : classes[i] == 0 ? TileClass::Empty
                                        : TileClass::Partial;
  return BlockMask::from_tile_classes(ext, tile_classes);
}

}  // namespace tilejit
