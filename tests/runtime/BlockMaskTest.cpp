// BlockMask: the run format against brute force on random tile classes, for every builder.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "runtime/BlockMask.h"

namespace tilejit {
namespace {

struct RandomClasses {
  BlockMaskShape shape;
  int q_tiles, kv_tiles;
  std::vector<TileClass> classes;
  TileClass at(int b, int h, int qt, int kt) const {
    return classes[((size_t(b) * shape.heads + h) * q_tiles + qt) * kv_tiles + kt];
  }
};

// Classes in stretches (so runs form) with random switches.
RandomClasses random_classes(std::mt19937_64& rng) {
  RandomClasses r;
  r.shape.batch = 1 + rng() % 2;
  r.shape.heads = 1 + rng() % 3;
  r.shape.block_q = 1 + rng() % 5;
  r.shape.block_kv = 1 + rng() % 5;
  r.shape.seq_q = rng() % 40;
  r.shape.seq_kv = rng() % 40;
  r.q_tiles = (r.shape.seq_q + r.shape.block_q - 1) / r.shape.block_q;
  r.kv_tiles = (r.shape.seq_kv + r.shape.block_kv - 1) / r.shape.block_kv;
  TileClass c = TileClass::Empty;
  r.classes.resize(size_t(r.shape.batch) * r.shape.heads * r.q_tiles * r.kv_tiles);
  for (TileClass& t : r.classes) {
    if (rng() % 4 == 0) c = static_cast<TileClass>(rng() % 3);
    t = c;
  }
  return r;
}

void expect_matches(const BlockMask& m, const RandomClasses& r) {
  ASSERT_EQ(m.q_tiles(), r.q_tiles);
  ASSERT_EQ(m.kv_tiles(), r.kv_tiles);
  BlockMask::Counts want;
  for (int b = 0; b < r.shape.batch; ++b)
    for (int h = 0; h < r.shape.heads; ++h) {
      int l = b * r.shape.heads + h;
      for (int qt = 0; qt < r.q_tiles; ++qt)
        for (int kt = 0; kt < r.kv_tiles; ++kt) {
          TileClass c = r.at(b, h, qt, kt);
          ASSERT_EQ(m.tile_class(b, h, qt, kt), c) << b << " " << h << " " << qt << " " << kt;
          (c == TileClass::Full ? want.full : c == TileClass::Partial ? want.partial : want.empty)++;
        }
      // Transposed lists: every (kt, qt) covered exactly as the forward says, runs sorted,
      // maximal (no two adjacent runs of one kind).
      for (int kt = 0; kt < r.kv_tiles; ++kt) {
        std::vector<TileClass> col(r.q_tiles, TileClass::Empty);
        size_t i = size_t(l) * r.kv_tiles + kt;
        int prev_end = -1;
        bool prev_full = false;
        for (int32_t k = m.t_offsets()[i]; k < m.t_offsets()[i + 1]; ++k) {
          const TileRun& run = m.t_runs()[k];
          ASSERT_GT(run.count(), 0);
          ASSERT_GE(run.first, prev_end);
          ASSERT_FALSE(run.first == prev_end && run.full() == prev_full) << "runs not merged";
          for (int qt = run.first; qt < run.first + run.count(); ++qt)
            col[qt] = run.full() ? TileClass::Full : TileClass::Partial;
          prev_end = run.first + run.count();
          prev_full = run.full();
        }
        for (int qt = 0; qt < r.q_tiles; ++qt) ASSERT_EQ(col[qt], r.at(b, h, qt, kt));
      }
    }
  BlockMask::Counts got = m.counts();
  EXPECT_EQ(got.full, want.full);
  EXPECT_EQ(got.partial, want.partial);
  EXPECT_EQ(got.empty, want.empty);
}

TEST(BlockMask, EveryBuilderMatchesBruteForceOnRandomClasses) {
  std::mt19937_64 rng(std::random_device{}());
  for (int iter = 0; iter < 300; ++iter) {
    RandomClasses r = random_classes(rng);
    expect_matches(BlockMask::from_tile_classes(r.shape, r.classes), r);
    // from_rows, with rows split into single-tile runs (it must merge them).
    std::vector<std::vector<TileRun>> rows(size_t(r.shape.batch) * r.shape.heads * r.q_tiles);
    for (int b = 0; b < r.shape.batch; ++b)
      for (int h = 0; h < r.shape.heads; ++h)
        for (int qt = 0; qt < r.q_tiles; ++qt)
          for (int kt = 0; kt < r.kv_tiles; ++kt)
            if (TileClass c = r.at(b, h, qt, kt); c != TileClass::Empty)
              rows[(size_t(b) * r.shape.heads + h) * r.q_tiles + qt].push_back(
                  TileRun::make(kt, 1, c == TileClass::Full));
    expect_matches(BlockMask::from_rows(r.shape, rows), r);
  }
}

// tiles_rise_with_q against its definition, on random classes, and on the masks it is for.
TEST(BlockMask, TilesRiseWithQ) {
  std::mt19937_64 rng(std::random_device{}());
  int rising = 0;
  for (int iter = 0; iter < 300; ++iter) {
    RandomClasses r = random_classes(rng);
    if (iter % 2)  // attended tiles as a prefix of random length that may or may not rise
      for (int b = 0; b < r.shape.batch; ++b)
        for (int h = 0; h < r.shape.heads; ++h)
          for (int qt = 0, n = 0; qt < r.q_tiles; ++qt) {
            n = std::min<int>(r.kv_tiles, n + int(rng() % 3) - (rng() % 8 == 0));
            for (int kt = 0; kt < r.kv_tiles; ++kt)
              r.classes[((size_t(b) * r.shape.heads + h) * r.q_tiles + qt) * r.kv_tiles + kt] =
                  kt < n ? TileClass::Full : TileClass::Empty;
          }
    std::vector<int> least(r.q_tiles, 1 << 30), most(r.q_tiles, 0);
    for (int b = 0; b < r.shape.batch; ++b)
      for (int h = 0; h < r.shape.heads; ++h)
        for (int qt = 0; qt < r.q_tiles; ++qt) {
          int n = 0;
          for (int kt = 0; kt < r.kv_tiles; ++kt) n += r.at(b, h, qt, kt) != TileClass::Empty;
          least[qt] = std::min(least[qt], n), most[qt] = std::max(most[qt], n);
        }
    bool expect = true;
    for (int qt = 1; qt < r.q_tiles; ++qt) expect = expect && least[qt] >= most[qt - 1];
    rising += expect;
    EXPECT_EQ(BlockMask::from_tile_classes(r.shape, r.classes).tiles_rise_with_q(), expect)
        << "iteration " << iter;
  }
  EXPECT_GT(rising, 30);
  EXPECT_LT(rising, 270);

  BlockMaskShape s;
  s.seq_q = s.seq_kv = 1000, s.block_q = 128, s.block_kv = 64;
  auto attended = [](bool any, bool all) {
    return all ? TileClass::Full : any ? TileClass::Partial : TileClass::Empty;
  };
  auto causal = [&](int, int, int qt, int kt) {
    return attended(kt * 64 <= qt * 128 + 127, kt * 64 + 63 <= qt * 128);
  };
  EXPECT_TRUE(BlockMask::from_classifier(s, causal).tiles_rise_with_q());
  // Two documents, [0, 600) and [600, 1000), causal within each: q tile 5 (640..767) attends
  // fewer tiles than q tile 4 (512..639).
  auto documents = [&](int b, int h, int qt, int kt) {
    if (kt * 64 >= 600 || qt * 128 + 127 < 600) return causal(b, h, qt, kt);
    return qt * 128 >= 600 ? TileClass::Empty : causal(b, h, qt, kt);
  };
  EXPECT_FALSE(BlockMask::from_classifier(s, documents).tiles_rise_with_q());
}

TEST(BlockMask, FromDenseClassifiesEachTile) {
  BlockMaskShape s{.batch = 1, .heads = 1, .seq_q = 5, .seq_kv = 5, .block_q = 2, .block_kv = 2};
  std::vector<uint8_t> dense(25);
  for (int q = 0; q < 5; ++q)
    for (int kv = 0; kv < 5; ++kv) dense[q * 5 + kv] = q >= kv;
  int64_t strides[4] = {25, 25, 5, 1};
  BlockMask m = BlockMask::from_dense(s, dense.data(), strides);
  EXPECT_EQ(m.tile_class(0, 0, 0, 0), TileClass::Partial);  // the diagonal tile
  EXPECT_EQ(m.tile_class(0, 0, 1, 0), TileClass::Full);
  EXPECT_EQ(m.tile_class(0, 0, 0, 1), TileClass::Empty);
  EXPECT_EQ(m.tile_class(0, 0, 2, 2), TileClass::Full);  // clipped corner: only (4, 4), kept
  EXPECT_EQ(m.tile_class(0, 0, 2, 1), TileClass::Full);
}

TEST(BlockMask, FromRowsRejectsOverlappingRuns) {
  BlockMaskShape s{.batch = 1, .heads = 1, .seq_q = 2, .seq_kv = 8, .block_q = 2, .block_kv = 2};
  EXPECT_THROW(BlockMask::from_rows(s, {{TileRun::make(0, 2, true), TileRun::make(1, 1, false)}}),
               std::invalid_argument);
  EXPECT_THROW(BlockMask::from_rows(s, {{TileRun::make(3, 2, true)}}), std::invalid_argument);
  EXPECT_THROW(BlockMask::from_rows(s, {}), std::invalid_argument);
}

}  // namespace
}  // namespace tilejit
