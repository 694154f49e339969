// Block-mask construction on the CPU by mask analysis (runtime/MaskAnalysis.h): causal,
// sliding window (1024), prefix-LM (prefix S/4) and document (sorted ids, causal) masks at
// S = 8k, 32k, 128k and 1M, tiles 128 x 64. Counters: runs and bytes of the mask, interval
// evaluations, and the time split between classification and assembling the lists.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "dsl/Expr.h"
#include "dsl/Stdlib.h"
#include "runtime/MaskAnalysis.h"

namespace {

using namespace tilejit;

enum class Kind { Causal, Sliding, Prefix, Document };

std::vector<int32_t> sorted_docs(int seq) {
  std::mt19937_64 rng(1);
  std::vector<int32_t> ids(static_cast<size_t>(seq));
  int32_t id = 0;
  int left = 0;
  for (int s = 0; s < seq; ++s) {
    if (left-- <= 0) ++id, left = 512 + static_cast<int>(rng() % 8192);
    ids[static_cast<size_t>(s)] = id;
  }
  return ids;
}

void analyse(benchmark::State& state, Kind kind) {
  int seq = static_cast<int>(state.range(0));
  EvalContext ctx;
  Expr mask;
  std::vector<int32_t> docs;
  switch (kind) {
    case Kind::Causal: mask = stdlib::causal(); break;
    case Kind::Sliding: mask = stdlib::sliding_window(lit(1024)); break;
    case Kind::Prefix: mask = stdlib::prefix_lm(lit(seq / 4)); break;
    case Kind::Document: {
      docs = sorted_docs(seq);
      dsl::Buffer doc("doc", ElemType::I32, {"B", "S"});
      mask = stdlib::document(doc) && stdlib::causal();
      ctx.buffers["doc"] = BufferView{docs.data(), ElemType::I32, {1, seq}, {}};
      break;
    }
  }
  BlockMaskShape shape{.batch = 1, .heads = 1, .seq_q = seq, .seq_kv = seq};
  AnalysisStats stats;
  size_t runs = 0, bytes = 0;
  for (auto _ : state) {
    BlockMask m = analyse_block_mask(mask, ctx, shape, {}, &stats);
    runs = m.runs().size();
    bytes = m.bytes();
    benchmark::DoNotOptimize(m);
  }
  state.counters["runs"] = static_cast<double>(runs);
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["evals"] = static_cast<double>(stats.box_evaluations);
  state.counters["classify_ms"] = stats.classify_seconds * 1e3;
  state.counters["build_ms"] = stats.build_seconds * 1e3;
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t s : {8 << 10, 32 << 10, 128 << 10, 1 << 20}) b->Arg(s);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(analyse, causal, Kind::Causal)->Apply(sizes);
BENCHMARK_CAPTURE(analyse, sliding_1024, Kind::Sliding)->Apply(sizes);
BENCHMARK_CAPTURE(analyse, prefix_quarter, Kind::Prefix)->Apply(sizes);
BENCHMARK_CAPTURE(analyse, document_causal, Kind::Document)->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
