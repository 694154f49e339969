// The GPU tile classifier against the elementwise reference: every FULL / EMPTY verdict sound
// on standard and random mask-shaped programs, and index-only masks exactly as the CPU
// analysis classifies them. Skipped without a GPU.
#include <gtest/gtest.h>

#include <random>

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
      {"head", q - kv < h * 64 && q >= kv}};
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

}  // namespace
}  // namespace tilejit::testing
