// Mask analysis end to end: the standard masks classify every tile exactly (each verdict equals
// the elementwise reference), on lengths that are not tile multiples and Sq != Skv; random
// programs classify soundly (precision reported); 1M-token causal and document masks build in
// bounded time with memory O(runs).
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "compiler/Lower.h"
#include "dsl/Expr.h"
#include "dsl/Stdlib.h"
#include "runtime/MaskAnalysis.h"
#include "tests/mask/MaskPrograms.h"

namespace tilejit::testing {
namespace {

using namespace tilejit::dsl;

struct Case {
  AttentionProgram program;
  Bindings bind;
  std::vector<std::vector<int32_t>> owned;  // buffer memory (views point into it)
};

Case make_case(std::string name, Expr mask) {
  Case c;
  c.program.name = std::move(name);
  c.program.mask = std::move(mask);
  return c;
}

// Sorted document ids: runs of random lengths, per batch entry.
std::vector<int32_t> sorted_docs(std::mt19937_64& rng, int batch, int seq, int mean_len) {
  std::vector<int32_t> ids(static_cast<size_t>(batch) * seq);
  for (int b = 0; b < batch; ++b) {
    int32_t id = 0, left = 1 + static_cast<int>(rng() % (2 * mean_len));
    for (int s = 0; s < seq; ++s) {
      if (left-- == 0) ++id, left = static_cast<int>(rng() % (2 * mean_len));
      ids[static_cast<size_t>(b) * seq + s] = id;
    }
  }
  return ids;
}

void bind_i32(Case& c, const std::string& name, std::vector<int32_t> data,
              std::vector<int64_t> shape, std::vector<std::string> dims) {
  c.program.buffers.push_back({name, ElemType::I32, std::move(dims)});
  c.owned.push_back(std::move(data));
  c.bind.buffer(name, TensorView::contiguous(c.owned.back().data(), DType::I32, std::move(shape),
                                             TensorView::Where::Host, name));
}

void expect_exact(const Case& c, const BlockMaskShape& shape) {
  LoweredAttention l = lower(c.program);
  BlockMask got = analyse_block_mask(l, c.bind, shape);
  BlockMask want = reference_block_mask(l, c.bind, shape);
  ASSERT_EQ(got.lists(), want.lists());
  int64_t wrong = 0;
  for (int b = 0; b < got.shape().batch; ++b)
    for (int h = 0; h < got.shape().heads; ++h)
      for (int qt = 0; qt < got.q_tiles(); ++qt)
        for (int kt = 0; kt < got.kv_tiles(); ++kt)
          if (got.tile_class(b, h, qt, kt) != want.tile_class(b, h, qt, kt)) {
            if (wrong++ < 5)
              ADD_FAILURE() << c.program.name << ": tile (" << b << "," << h << "," << qt << ","
                            << kt << ") got " << int(got.tile_class(b, h, qt, kt)) << " want "
                            << int(want.tile_class(b, h, qt, kt));
          }
  EXPECT_EQ(wrong, 0) << c.program.name << " seq " << shape.seq_q << "x" << shape.seq_kv;
  EXPECT_EQ(got.offsets(), want.offsets());
  EXPECT_EQ(got.t_offsets(), want.t_offsets());
}

std::vector<BlockMaskShape> shapes() {
  return {{.batch = 2, .heads = 3, .seq_q = 1000, .seq_kv = 1000},
          {.batch = 2, .heads = 3, .seq_q = 777, .seq_kv = 1500},
          {.batch = 2, .heads = 3, .seq_q = 1300, .seq_kv = 450},
          {.batch = 1, .heads = 1, .seq_q = 200, .seq_kv = 200, .block_q = 64, .block_kv = 32},
          {.batch = 2, .heads = 1, .seq_q = 130, .seq_kv = 70, .block_q = 16, .block_kv = 16}};
}

TEST(MaskAnalysis, IndexOnlyMasksAreExact) {
  std::vector<Case> cases;
  cases.push_back(make_case("causal", stdlib::causal()));
  cases.push_back(make_case("window_100", stdlib::sliding_window(lit(100))));
  cases.push_back(make_case("window_256", stdlib::sliding_window(lit(256))));
  cases.push_back(make_case("prefix_300", stdlib::prefix_lm(lit(300))));
  cases.push_back(make_case("chunked_100", stdlib::chunked(lit(100)) && stdlib::causal()));
  cases.push_back(make_case("chunked_128", stdlib::chunked(lit(128))));
  cases.push_back(make_case("image", stdlib::image_block_or_causal(lit(90), lit(411))));
  cases.push_back(make_case("bidirectional_window", abs(q - kv) <= 70));
  cases.push_back(make_case("all_true", lit(true)));
  cases.push_back(make_case("all_false", lit(false)));
  cases.push_back(make_case("head_dependent", q - kv < h * 50 + 10 && q >= kv));
  {
    Case c =
        make_case("chunked_param", q / Param("chunk", Type::I32) == kv / Param("chunk", Type::I32));
    c.program.params.push_back({"chunk", Type::I32});
    c.bind.param("chunk", 96);
    cases.push_back(std::move(c));
  }
  for (const Case& c : cases)
    for (const BlockMaskShape& s : shapes()) expect_exact(c, s);
}

TEST(MaskAnalysis, BufferMasksAreExact) {
  std::mt19937_64 rng(3);
  for (const BlockMaskShape& s : shapes()) {
    int seq = std::max(s.seq_q, s.seq_kv);
    for (int mean : {40, 300}) {
      Buffer doc("doc", ElemType::I32, {"B", "S"});
      Case a = make_case("document_causal", stdlib::document(doc) && stdlib::causal());
      bind_i32(a, "doc", sorted_docs(rng, s.batch, seq, mean), {s.batch, seq}, {"B", "S"});
      expect_exact(a, s);
      Case b = make_case("document", stdlib::document(doc));
      bind_i32(b, "doc", sorted_docs(rng, s.batch, seq, mean), {s.batch, seq}, {"B", "S"});
      expect_exact(b, s);
    }
    Buffer prefix("prefix", ElemType::I32, {"B"});
    Case p = make_case("prefix_buffer", kv < prefix(b) || q >= kv);
    bind_i32(p, "prefix", {static_cast<int32_t>(s.seq_kv / 3), 7}, {2}, {"B"});
    if (s.batch == 2) expect_exact(p, s);
  }
}

// Random mask-shaped programs: every verdict sound; the share of exact verdicts is reported.
TEST(MaskAnalysis, RandomProgramsAreSoundWithPrecisionReport) {
  std::mt19937_64 rng(11);
  int64_t tiles = 0, exact = 0, uniform = 0, decided_uniform = 0;
  for (int i = 0; i < 300; ++i) {
    AttentionProgram p = random_mask_program(rng, 1 + static_cast<int>(rng() % 3));
    BlockMaskShape s{.batch = 2,
                     .heads = 2,
                     .seq_q = 20 + static_cast<int>(rng() % 80),
                     .seq_kv = 20 + static_cast<int>(rng() % 80),
                     .block_q = 8,
                     .block_kv = 4};
    MaskBindings bind = random_mask_bindings(rng, p, 2, 2, 70);
    BlockMask got = analyse_block_mask(p.mask, bind.ctx, s, {.threads = 1});
    BlockMask want = reference_block_mask(p.mask, bind.ctx, s);
    for (int b = 0; b < got.shape().batch; ++b)
      for (int h = 0; h < got.shape().heads; ++h)
        for (int qt = 0; qt < got.q_tiles(); ++qt)
          for (int kt = 0; kt < got.kv_tiles(); ++kt) {
            TileClass g = got.tile_class(b, h, qt, kt), w = want.tile_class(b, h, qt, kt);
            ASSERT_TRUE(g == TileClass::Partial || g == w)
                << "unsound tile (" << b << "," << h << "," << qt << "," << kt << ")";
            ++tiles;
            exact += g == w;
            uniform += w != TileClass::Partial;
            decided_uniform += w != TileClass::Partial && g == w;
          }
    BlockMask refined = analyse_block_mask(p.mask, bind.ctx, s, {.refine_partial = true});
    ASSERT_EQ(refined.runs().size(), want.runs().size());
    ASSERT_EQ(refined.offsets(), want.offsets());
  }
  std::printf("random masks: %lld tiles, %.1f%% verdicts exact, %.1f%% of uniform tiles decided\n",
              static_cast<long long>(tiles), 100.0 * exact / tiles,
              100.0 * decided_uniform / std::max<int64_t>(uniform, 1));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(MaskAnalysis, MillionTokenCausalAndDocument) {
  const int S = 1 << 20;
  BlockMaskShape shape{.batch = 1, .heads = 16, .seq_q = S, .seq_kv = S};
  {
    Case c = make_case("causal", stdlib::causal());
    auto t0 = std::chrono::steady_clock::now();
    BlockMask m = analyse_block_mask(lower(c.program), c.bind, shape);
    double secs = seconds_since(t0);
    std::printf("causal 1M: %.3f s, %zu runs, %zu bytes\n", secs, m.runs().size(), m.bytes());
    EXPECT_EQ(m.lists(), 1);
    EXPECT_LE(m.runs().size(), 2u * m.q_tiles());
    EXPECT_LE(m.bytes(),
              16u * (m.runs().size() + m.t_runs().size()) + 8u * (m.q_tiles() + m.kv_tiles()) + 64);
    BlockMask::Counts n = m.counts();
    EXPECT_EQ(n.partial, 2 * m.q_tiles());
    EXPECT_LT(secs, 60.0);
  }
  {
    std::mt19937_64 rng(5);
    Buffer doc("doc", ElemType::I32, {"B", "S"});
    Case c = make_case("document_causal", stdlib::document(doc) && stdlib::causal());
    bind_i32(c, "doc", sorted_docs(rng, 1, S, 4096), {1, S}, {"B", "S"});
    auto t0 = std::chrono::steady_clock::now();
    BlockMask m = analyse_block_mask(lower(c.program), c.bind, shape);
    double secs = seconds_since(t0);
    std::printf("document 1M: %.3f s, %zu runs, %zu bytes\n", secs, m.runs().size(), m.bytes());
    EXPECT_EQ(m.lists(), 1);
    EXPECT_LE(m.runs().size(), 4u * m.q_tiles());
    EXPECT_LT(m.bytes(), size_t{4} << 20);
    EXPECT_LT(secs, 60.0);
  }
}

}  // namespace
}  // namespace tilejit::testing
