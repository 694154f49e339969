// The fused loss's workspace plan (runtime/LinearCeWorkspace.h): the backward's vocabulary chunks
// fit grad_buffer_bytes with their staging buffers, and no two slices overlap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/LinearCeWorkspace.h"

namespace tilejit {
namespace {

LinearCeShape gemma_like(bool stage_weights) {
  LinearCeShape s;
  s.n_rows = 8192;
  s.n_kept = 7364;
  s.dim = 2304;
  s.segment_sizes = {256000};
  s.filtering = true;
  s.stage_weights = stage_weights;
  return s;
}

// Every non-empty slice lies inside the allocation and apart from the others.
void expect_disjoint(const LinearCeWorkspace& ws) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const WorkspaceSlice* s :
       {&ws.kept, &ws.slot, &ws.count, &ws.hidden_kept, &ws.part_max, &ws.part_sum, &ws.part_zsum,
        &ws.target_logit, &ws.target_raw, &ws.lse, &ws.row_loss, &ws.tile_max, &ws.loss,
        &ws.row_grad, &ws.tile_class, &ws.row_list, &ws.row_count, &ws.col_list, &ws.col_count,
        &ws.grad, &ws.staged_weights, &ws.colsum_partial, &ws.weight_colsum, &ws.hidden_wsum,
        &ws.grad_sum, &ws.target_grad, &ws.target_slot})
    if (s->bytes > 0) spans.emplace_back(s->offset, s->offset + s->bytes);
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_LE(spans[i].second, ws.total_bytes);
    if (i > 0) EXPECT_LE(spans[i - 1].second, spans[i].first);
  }
}

TEST(LinearCeWorkspace, ChunksOfGFitTheBuffer) {
  const LinearCeShape s = gemma_like(false);
  const LinearCeWorkspace ws = plan_linear_ce(s);
  EXPECT_EQ(ws.row_tiles, 58);  // ceil(7364 / 128)
  EXPECT_EQ(ws.num_tiles, 2000);
  EXPECT_EQ(ws.grad_stride, int64_t(ws.chunk_tiles) * 128);
  EXPECT_EQ(ws.grad.bytes, int64_t(ws.row_tiles) * 128 * ws.grad_stride * 2);
  EXPECT_LE(ws.grad.bytes, s.grad_buffer_bytes);
  EXPECT_GT(ws.grad.bytes + int64_t(ws.row_tiles) * 128 * 128 * 2, s.grad_buffer_bytes)
      << "one more tile per chunk would have fit";
  EXPECT_EQ(ws.num_chunks, (ws.num_tiles + ws.chunk_tiles - 1) / ws.chunk_tiles);
  EXPECT_EQ(ws.staged_weights.bytes, 0);
  expect_disjoint(ws);
}

TEST(LinearCeWorkspace, StagedWeightRowsShareTheBuffer) {
  const LinearCeShape s = gemma_like(true);
  const LinearCeWorkspace ws = plan_linear_ce(s);
  const LinearCeWorkspace plain = plan_linear_ce(gemma_like(false));
  EXPECT_EQ(ws.staged_weights.bytes, ws.grad_stride * s.dim * 2);  // the chunk's ids x dim
  EXPECT_LE(ws.grad.bytes + ws.staged_weights.bytes, s.grad_buffer_bytes);
  EXPECT_LT(ws.chunk_tiles, plain.chunk_tiles);
  EXPECT_GT(ws.num_chunks, plain.num_chunks);
  expect_disjoint(ws);
}

TEST(LinearCeWorkspace, AtLeastOneTilePerChunk) {
  LinearCeShape s = gemma_like(true);
  s.grad_buffer_bytes = 1;  // smaller than one tile's column: one tile per chunk all the same
  const LinearCeWorkspace ws = plan_linear_ce(s);
  EXPECT_EQ(ws.chunk_tiles, 1);
  EXPECT_EQ(ws.num_chunks, ws.num_tiles);
  EXPECT_EQ(ws.staged_weights.bytes, 128 * s.dim * 2);
}

}  // namespace
}  // namespace tilejit
