// Host-side costs of the compile path, per program: building and hashing a program, the
// passes, CUDA codegen, a cold NVRTC compile, and kernel-cache memory and disk hits.
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>

#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "compiler/Simplify.h"
#include "dsl/Builders.h"
#include "dsl/Stdlib.h"
#include "runtime/DenseMask.h"
#include "runtime/KernelCache.h"

namespace {

using namespace tilejit;

AttentionProgram doc_softcap() { return stdlib::standard_attention_program("doc_softcap"); }

void BM_BuildAndHash(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(program_hash(doc_softcap()));
}
BENCHMARK(BM_BuildAndHash);

void BM_Simplify(benchmark::State& state) {
  AttentionProgram p = doc_softcap();
  for (auto _ : state) benchmark::DoNotOptimize(simplify(p));
}
BENCHMARK(BM_Simplify);

void BM_Lower(benchmark::State& state) {
  AttentionProgram p = doc_softcap();
  for (auto _ : state) benchmark::DoNotOptimize(lower(p));
}
BENCHMARK(BM_Lower);

void BM_CudaCodegen(benchmark::State& state) {
  AttentionProgram p = doc_softcap();
  for (auto _ : state) benchmark::DoNotOptimize(dense_mask_source(p));
}
BENCHMARK(BM_CudaCodegen);

std::filesystem::path fresh_dir(const char* tag) {
  auto d = std::filesystem::temp_directory_path() /
           (std::string("tilejit-bench-") + tag + "-" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::filesystem::create_directories(d);
  return d;
}

// A fresh cache (and a fresh program text) each iteration: nothing can be a hit.
void BM_NvrtcColdCompile(benchmark::State& state) {
  KernelCacheOptions opt;
  opt.use_disk = false;
  int i = 0;
  for (auto _ : state) {
    KernelCache cache(opt);
    AttentionProgram p = doc_softcap();
    p.name = "cold_" + std::to_string(i++);
    KernelSpec spec = kernel_spec(dense_mask_source(p), p.name);
    spec.source += "\n// " + std::to_string(i) + "\n";
    benchmark::DoNotOptimize(cache.get(spec, "sm_90a"));
  }
}
BENCHMARK(BM_NvrtcColdCompile)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_CacheMemoryHit(benchmark::State& state) {
  KernelCacheOptions opt;
  opt.use_disk = false;
  KernelCache cache(opt);
  AttentionProgram p = doc_softcap();
  KernelSpec spec = kernel_spec(dense_mask_source(p), p.name);
  cache.get(spec, "sm_90a");
  for (auto _ : state) benchmark::DoNotOptimize(cache.get(spec, "sm_90a"));
}
BENCHMARK(BM_CacheMemoryHit)->Unit(benchmark::kMicrosecond);

// A new cache object on a warm directory each iteration: the read + checksum of one entry.
void BM_CacheDiskHit(benchmark::State& state) {
  KernelCacheOptions opt;
  opt.dir = fresh_dir("disk");
  AttentionProgram p = doc_softcap();
  KernelSpec spec = kernel_spec(dense_mask_source(p), p.name);
  KernelCache(opt).get(spec, "sm_90a");
  for (auto _ : state) {
    KernelCache cache(opt);
    benchmark::DoNotOptimize(cache.get(spec, "sm_90a"));
  }
  std::filesystem::remove_all(opt.dir);
}
BENCHMARK(BM_CacheDiskHit)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
