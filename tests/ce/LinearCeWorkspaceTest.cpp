// The fused loss's workspace plan (runtime/LinearCeWorkspace.h): no two slices overlap, and the
// backward's vocabulary chunks cover every tile once, in order, each filling the buffer as far as
// its next tile would not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/LinearCeWorkspace.h"
namespace tilejit {
namespace {

LinearCeShape gemma_like() {
  LinearCeShape s;
  s.n_rows = 8192;
  s.n_kept = 7364;
  s.dim = 2304;
  s.segment_sizes = {256000};
  s.filtering = true;
  return s;
}

// Every non-empty slice lies inside the allocation and apart from the others.
void expect_disjoint(const LinearCeWorkspace& ws) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const WorkspaceSlice* s :
       {&ws.kept,          &ws.slot,        &ws.count,        &ws.hidden_kept, &ws.part_max,
        &ws.part_sum,      &ws.part_zsum,   &ws.target_logit, &ws.target_raw,  &ws.lse,
        &ws.row_loss,      &ws.tile_max,    &ws.loss,         &ws.row_grad,    &ws.tile_class,
        &ws.row_list,      &ws.row_count,   &ws.col_list,     &ws.col_count,   &ws.col_steps,  &ws.col_corrections,
        &ws.pair_rank,     &ws.pair_first,  &ws.staged_first, &ws.pair_list,   &ws.colsum_partial,
        &ws.weight_colsum, &ws.hidden_wsum, &ws.grad_sum,     &ws.target_grad, &ws.target_slot,
        &ws.saved_tile_class, &ws.pair_visit, &ws.kl_parts, &ws.teacher_tile_max,
        &ws.teacher_hidden_kept, &ws.tempered_lse, &ws.teacher_lse, &ws.teacher_target_logit})
    if (s->bytes > 0) spans.emplace_back(s->offset, s->offset + s->bytes);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_LE(spans[i].second, ws.total_bytes);
    if (i > 0) {
      EXPECT_LE(spans[i - 1].second, spans[i].first);
    }
  }
}

// The three regions (saved, the forward's scratch, the backward's) hold their own slices: the
// state keeps only the first, so a slice the backward reads from the forward must lie there.
void expect_regions(const LinearCeWorkspace& ws) {
  auto inside = [](const WorkspaceSlice& s, int64_t begin, int64_t end) {
    return s.bytes == 0 || (s.offset >= begin && s.offset + s.bytes <= end);
  };
  EXPECT_LE(0, ws.saved_end);
  EXPECT_LE(ws.saved_end, ws.forward_end);
  EXPECT_LE(ws.forward_end, ws.total_bytes);
  for (const WorkspaceSlice* s :
       {&ws.kept, &ws.slot, &ws.count, &ws.hidden_kept, &ws.target_logit, &ws.target_raw, &ws.lse,
        &ws.row_loss, &ws.loss, &ws.saved_tile_class, &ws.teacher_hidden_kept, &ws.tempered_lse,
        &ws.teacher_lse, &ws.teacher_target_logit})
    EXPECT_TRUE(inside(*s, 0, ws.saved_end)) << s->offset;
  for (const WorkspaceSlice* s :
       {&ws.part_max, &ws.part_sum, &ws.part_zsum, &ws.tile_max, &ws.kl_parts,
        &ws.teacher_tile_max})
    EXPECT_TRUE(inside(*s, ws.saved_end, ws.forward_end)) << s->offset;
  for (const WorkspaceSlice* s :
       {&ws.row_grad, &ws.tile_class, &ws.row_list, &ws.pair_visit, &ws.target_slot})
    EXPECT_TRUE(inside(*s, ws.forward_end, ws.total_bytes)) << s->offset;
  // Each region starts aligned (its slices keep their alignment from its own base).
  EXPECT_EQ(ws.saved_end % 256, 0);
  EXPECT_EQ(ws.forward_end % 256, 0);
}

TEST(LinearCeWorkspace, RegionsHoldTheirSlices) {
  LinearCeShape s = gemma_like();
  const LinearCeWorkspace plain = plan_linear_ce(s);
  expect_regions(plain);
  // The tile maxima (4 bytes per tile and row) are scratch; the classes (a byte per pair) saved.
  EXPECT_EQ(plain.tile_max.bytes, int64_t{4} * 2000 * 7364);
  EXPECT_EQ(plain.saved_tile_class.bytes, int64_t{58} * 2000);
  s.kl = true;
  s.teacher_dim = 1024;
  s.smoothing = true;
  const LinearCeWorkspace kl = plan_linear_ce(s);
  expect_regions(kl);
  EXPECT_GT(kl.teacher_tile_max.bytes, 0);
  EXPECT_GT(kl.kl_parts.bytes, 0);
  s.filtering = false;  // no maxima, no classes to keep
  const LinearCeWorkspace exact = plan_linear_ce(s);
  expect_regions(exact);
  EXPECT_EQ(exact.tile_max.bytes, 0);
  EXPECT_EQ(exact.saved_tile_class.bytes, 0);
}

TEST(LinearCeWorkspace, SlicesAreDisjoint) {
  const LinearCeWorkspace ws = plan_linear_ce(gemma_like());
  EXPECT_EQ(ws.row_tiles, 58);  // ceil(7364 / 128)
  EXPECT_EQ(ws.num_tiles, 2000);
  EXPECT_EQ(ws.pair_list.bytes, 8 * 58 * 2000);  // one (tile, row tile) per possible pair
  EXPECT_EQ(ws.pair_first.bytes, 4 * 2001);
  expect_disjoint(ws);
}

// Checks `plan` against its contract, independently of how it was built.
void expect_valid_plan(const CeBackwardPlan& plan, const std::vector<int32_t>& pairs,
                       const std::vector<uint8_t>& staged, int64_t dim, int64_t budget) {
  const int64_t block = CeBackwardPlan::kGradBlockBytes, stage = staged_tile_bytes(dim);
  auto need = [&](size_t t) { return pairs[t] * block + (staged[t] ? stage : 0); };
  size_t next = 0;
  int64_t largest = 1, most_pairs = 0;
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    const CeBackwardChunk& ch = plan.chunks[c];
    ASSERT_EQ(size_t(ch.first_tile), next) << "chunk " << c;
    ASSERT_GE(ch.tiles, 1);
    ASSERT_LE(ch.tiles, CeBackwardPlan::kMaxChunkTiles);
    int64_t bytes = 0, p = 0, st = 0, visited = 0;
    for (int t = ch.first_tile; t < ch.first_tile + ch.tiles; ++t) {
      bytes += need(t);
      p += pairs[t];
      st += staged[t] ? 1 : 0;
      visited += pairs[t] > 0 ? 1 : 0;
    }
    EXPECT_EQ(ch.pairs, p);
    EXPECT_EQ(ch.staged_tiles, st);
    EXPECT_EQ(ch.visited_tiles, visited) << "chunk " << c;
    if (ch.tiles > 1) {
      EXPECT_LE(bytes, budget) << "chunk " << c;
    }
    next = ch.first_tile + ch.tiles;
    if (next < pairs.size()) {  // greedy: the next tile would not have fit
      EXPECT_TRUE(ch.tiles == CeBackwardPlan::kMaxChunkTiles || bytes + need(next) > budget)
          << "chunk " << c;
    }
    largest = std::max(largest, bytes);
    most_pairs = std::max(most_pairs, p);
  }
  EXPECT_EQ(next, pairs.size());
  EXPECT_EQ(plan.buffer_bytes, largest);
  EXPECT_EQ(plan.max_pairs, most_pairs);
}

// The products' launch grid holds at most 65,535 row tiles: one more kept row than they cover
// is refused with a clear error, the largest count they cover is planned.
TEST(LinearCeWorkspace, KeptRowsBeyondTheLaunchGridAreRefused) {
  LinearCeShape s = gemma_like();
  s.n_rows = s.n_kept = int64_t{65535} * 128;
  EXPECT_EQ(plan_linear_ce(s).row_tiles, 65535);
  s.n_rows = s.n_kept = int64_t{65535} * 128 + 1;
  try {
    plan_linear_ce(s);
    ADD_FAILURE() << "no error for 65,536 row tiles";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("8,388,480 kept rows"), std::string::npos) << e.what();
  }
}

TEST(LinearCeWorkspace, BackwardChunksFillTheBuffer) {
  // Fresh counts every run; TILEJIT_TEST_SEED replays one (the seed is printed).
  const char* env = std::getenv("TILEJIT_TEST_SEED");
  const unsigned seed = env ? unsigned(std::strtoul(env, nullptr, 10)) : std::random_device{}();
  std::printf("TILEJIT_TEST_SEED=%u\n", seed);
  std::mt19937 rng(seed);
  const int64_t dim = 2304;
  for (int round = 0; round < 40; ++round) {
    const int tiles = 1 + int(rng() % 3000), row_tiles = 1 + int(rng() % 80);
    std::vector<int32_t> pairs(tiles);
    std::vector<uint8_t> staged(tiles);
    // Dense at the front and sparse behind, as a vocabulary order leaves a zipf head's tiles.
    for (int t = 0; t < tiles; ++t) {
      const double keep = t < tiles / 5 ? 0.9 : 0.05;
      int n = 0;
      for (int r = 0; r < row_tiles; ++r) n += std::uniform_real_distribution<>(0, 1)(rng) < keep;
      pairs[t] = n;
      staged[t] = round % 2 && n > 0;
    }
    const int64_t budget =
        std::vector<int64_t>{1, int64_t(16) << 20, int64_t(512) << 20}[round % 3];
    SCOPED_TRACE(testing::Message() << "round " << round << " tiles " << tiles << " row tiles "
                                    << row_tiles << " budget " << budget);
    expect_valid_plan(plan_backward_chunks(pairs, staged, dim, budget), pairs, staged, dim, budget);
  }
}

TEST(LinearCeWorkspace, SparseBackwardNeedsFewerChunksThanDense) {
  // Gemma-2-like: 58 row tiles x 2000 tiles; 18% of the pairs visited, all at the front.
  const int64_t dim = 2304, budget = int64_t(512) << 20;
  std::vector<int32_t> dense(2000, 58), sparse(2000, 0);
  for (int t = 0; t < 360; ++t) sparse[t] = 58;
  const std::vector<uint8_t> none(2000, 0);
  const CeBackwardPlan d = plan_backward_chunks(dense, none, dim, budget);
  const CeBackwardPlan s = plan_backward_chunks(sparse, none, dim, budget);
  // 58 blocks of 32 KiB a tile: 282 tiles fill 512 MiB.
  EXPECT_EQ(d.chunks.size(), 8u);  // ceil(2000 / 282)
  ASSERT_EQ(s.chunks.size(), 3u);  // 282 dense tiles; 78 dense + 946 empty (1024 tiles); the rest
  EXPECT_EQ(s.chunks[0].tiles, 282);
  EXPECT_EQ(s.chunks[1].pairs, 78 * 58);
  EXPECT_EQ(s.chunks[1].tiles, CeBackwardPlan::kMaxChunkTiles);
  EXPECT_EQ(s.chunks[1].visited_tiles, 78);
  EXPECT_EQ(s.chunks[2].visited_tiles, 0);
  EXPECT_EQ(d.chunks[0].visited_tiles, d.chunks[0].tiles);
}

TEST(LinearCeWorkspace, OneTileBeyondTheBudgetGetsAChunkOfItsOwn) {
  const std::vector<int32_t> pairs = {3, 100, 2};
  const std::vector<uint8_t> staged = {0, 1, 0};
  const CeBackwardPlan plan =
      plan_backward_chunks(pairs, staged, 64, 4 * CeBackwardPlan::kGradBlockBytes);
  ASSERT_EQ(plan.chunks.size(), 3u);
  EXPECT_EQ(plan.buffer_bytes, 100 * CeBackwardPlan::kGradBlockBytes + staged_tile_bytes(64));
  EXPECT_EQ(plan.max_pairs, 100);
  EXPECT_THROW(plan_backward_chunks(pairs, {}, 64, 1), std::invalid_argument);
}

}  // namespace
}  // namespace tilejit
