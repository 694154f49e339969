// The GPU tile classifier against the elementwise reference: every FULL / EMPTY verdict sound
// on standard and random mask-shaped programs; index-only masks exactly as the CPU analysis
// classifies them, rows with more runs than a slot holds too; at 1M tokens, causal and sorted
// document masks give the CPU analysis's runs. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <tuple>

#include "compiler/Lower.h"
#include "dsl/Expr.h"
#include "dsl/Stdlib.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/MaskAnalysis.h"
#include "runtime/MaskAnalysisGpu.h"
#include "tests/mask/MaskPrograms.h"

namespace tilejit::testing {
namespace {

using namespace tilejit::dsl;

bool have_gpu() {
  Driver* d = Driver::get();
  if (d == nullptr) return false;
  if (!d->current_context()) d->use_device(0);
  return true;
}

// Host and device bindings of the same values.
struct Bound {
  Bindings host, device;
  std::vector<DeviceBuffer> memory;
};

Bound bind_all(const AttentionProgram& p, const EvalContext& ctx) {
  Bound out;
  auto dtype = [](ElemType e) {
    return e == ElemType::I32    ? DType::I32
           : e == ElemType::F32  ? DType::F32
           : e == ElemType::BF16 ? DType::BF16
                                 : DType::F16;
  };
  for (const BufferDecl& b : p.buffers) {
    const BufferView& v = ctx.buffers.at(b.name);
    int64_t n = 1;
    for (int64_t s : v.sizes) n *= s;
    size_t bytes = static_cast<size_t>(n) * elem_size(b.elem);
    out.memory.emplace_back(std::max<size_t>(bytes, 4));
    out.memory.back().copy_from_host(v.data, bytes);
    out.host.buffer(b.name, TensorView::contiguous(const_cast<void*>(v.data), dtype(b.elem),
                                                   v.sizes, TensorView::Where::Host, b.name));
    out.device.buffer(b.name, TensorView::contiguous(out.memory.back().data(), dtype(b.elem),
                                                     v.sizes, TensorView::Where::Device, b.name));
  }
  for (const ParamDecl& q : p.params) {
    const ParamValue& v = ctx.params.at(q.name);
    if (q.type == Type::I32) {
      int32_t x = static_cast<int32_t>(std::get<int64_t>(v));
      out.host.param(q.name, x);
      out.device.param(q.name, x);
    } else {
      float x = static_cast<float>(
          std::holds_alternative<double>(v) ? std::get<double>(v) : double(std::get<int64_t>(v)));
      out.host.param(q.name, x);
      out.device.param(q.name, x);
    }
  }
  return out;
}

// Returns the number of tiles whose verdict differs from `want` (all must be sound).
int64_t compare(const BlockMask& gpu, const BlockMask& want, const std::string& what) {
  int64_t differ = 0;
  for (int b = 0; b < want.shape().batch; ++b)
    for (int h = 0; h < want.shape().heads; ++h)
      for (int qt = 0; qt < want.q_tiles(); ++qt)
        for (int kt = 0; kt < want.kv_tiles(); ++kt) {
          TileClass g = gpu.tile_class(b, h, qt, kt), w = want.tile_class(b, h, qt, kt);
          if (g != TileClass::Partial && g != w) {
            ADD_FAILURE() << what << ": unsound tile (" << b << "," << h << "," << qt << "," << kt
                          << ")";
            return differ;
          }
          differ += g != w;
        }
  return differ;
}

TEST(ClassifyGpu, IndexOnlyMasksMatchTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << Driver::unavailable_reason();
  std::vector<std::pair<std::string, Expr>> masks = {
      {"causal", stdlib::causal()},
      {"window", stdlib::sliding_window(lit(300))},
      {"prefix", stdlib::prefix_lm(lit(500))},
      {"chunked", stdlib::chunked(lit(200)) && stdlib::causal()},
      {"image", stdlib::image_block_or_causal(lit(100), lit(700))},
      {"head", q - kv < h * 64 && q >= kv},
      {"stripes", (kv / 64) % 2 == 0 && q >= kv}};  // ~16 runs a row: more than a slot holds
  for (const auto& [name, mask] : masks) {
    AttentionProgram p;
    p.name = name;
    p.mask = mask;
    LoweredAttention l = lower(p);
    for (BlockMaskShape s :
         {BlockMaskShape{.batch = 2, .heads = 4, .seq_q = 2000, .seq_kv = 2000},
          BlockMaskShape{.batch = 1, .heads = 2, .seq_q = 1000, .seq_kv = 1777}}) {
      BlockMask gpu = analyse_block_mask_gpu(l, Bindings{}, s);
      BlockMask cpu = analyse_block_mask(l, Bindings{}, s);
      BlockMask ref = reference_block_mask(l, Bindings{}, s);
      compare(gpu, ref, name);
      EXPECT_EQ(gpu.offsets(), cpu.offsets()) << name;
      EXPECT_EQ(compare(gpu, cpu, name), 0) << name;
    }
  }
}

TEST(ClassifyGpu, RandomMaskProgramsAreSound) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << Driver::unavailable_reason();
  std::mt19937_64 rng(17);
  int64_t tiles = 0, differ = 0;
  for (int i = 0; i < 40; ++i) {
    AttentionProgram p = random_mask_program(rng, 3);
    MaskBindings mb = random_mask_bindings(rng, p, 2, 2, 300);
    Bound bound = bind_all(p, mb.ctx);
    LoweredAttention l = lower(p);
    BlockMaskShape s{
        .batch = 2, .heads = 2, .seq_q = 250, .seq_kv = 280, .block_q = 16, .block_kv = 8};
    BlockMask gpu = analyse_block_mask_gpu(l, bound.device, s);
    BlockMask ref = reference_block_mask(l, bound.host, s);
    differ += compare(gpu, ref, "random #" + std::to_string(i));
    tiles += static_cast<int64_t>(ref.lists()) * ref.q_tiles() * ref.kv_tiles();
  }
  std::printf("GPU random masks: %lld tiles, %.1f%% verdicts exact\n",
              static_cast<long long>(tiles), 100.0 * (tiles - differ) / tiles);
}

void expect_same_runs(const BlockMask& got, const BlockMask& want, const std::string& what) {
  ASSERT_EQ(got.offsets(), want.offsets()) << what;
  ASSERT_EQ(got.runs().size(), want.runs().size()) << what;
  for (size_t i = 0; i < got.runs().size(); ++i) {
    ASSERT_EQ(got.runs()[i].first, want.runs()[i].first) << what << " run " << i;
    ASSERT_EQ(got.runs()[i].count_kind, want.runs()[i].count_kind) << what << " run " << i;
  }
}

TEST(ClassifyGpu, MillionTokenRunsMatchTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU: " << Driver::unavailable_reason();
  const int S = 1 << 20;
  std::mt19937_64 rng(43);
  std::vector<int32_t> doc(S);
  for (int32_t& d : doc) d = static_cast<int32_t>(rng() % 32);
  std::sort(doc.begin(), doc.end());
  DeviceBuffer doc_device(doc.size() * sizeof(int32_t));
  doc_device.copy_from_host(doc.data(), doc.size() * sizeof(int32_t));
  Bindings host{{"doc", TensorView::contiguous(doc.data(), DType::I32, {1, S},
                                               TensorView::Where::Host, "doc")}};
  Bindings device{{"doc", TensorView::contiguous(doc_device.data(), DType::I32, {1, S},
                                                 TensorView::Where::Device, "doc")}};
  Buffer doc_buffer("doc", ElemType::I32, {"B", "S"});
  for (const auto& [name, mask, reads_doc] : std::vector<std::tuple<std::string, Expr, bool>>{
           {"causal", stdlib::causal(), false},
           {"document_causal", stdlib::document(doc_buffer) && stdlib::causal(), true}}) {
    AttentionProgram p;
    p.name = name;
    p.mask = mask;
    if (reads_doc) p.buffers.push_back({"doc", ElemType::I32, {"B", "S"}});
    LoweredAttention l = lower(p);
    BlockMaskShape s{.batch = 1, .heads = 16, .seq_q = S, .seq_kv = S};
    Bindings no_buffers;
    const Bindings& h = reads_doc ? host : no_buffers;
    const Bindings& d = reads_doc ? device : no_buffers;
    analyse_block_mask_gpu(l, d, s);  // compiles and loads the classifier
    auto t0 = std::chrono::steady_clock::now();
    BlockMask gpu = analyse_block_mask_gpu(l, d, s);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    BlockMask cpu = analyse_block_mask(l, h, s);
    std::printf("%s 1M on the GPU: %.3f ms, %zu runs (CPU %zu)\n", name.c_str(), ms,
                gpu.runs().size(), cpu.runs().size());
    EXPECT_EQ(gpu.runs().size(), cpu.runs().size()) << name;
    expect_same_runs(gpu, cpu, name);
  }
}

}  // namespace
}  // namespace tilejit::testing
