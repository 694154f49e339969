#include "runtime/LinearCeWorkspace.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace tilejit {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Forward split count: the grid fwd_row_tiles x splits should fill whole waves of resident CTAs,
// each CTA long enough (several vocabulary tiles) to hide its pipeline start. The splits are a
// multiple of s.split_cluster (whole clusters; the last ones may then be short or empty).
void choose_splits(LinearCeWorkspace& ws, const LinearCeShape& s) {
  const int64_t slots = int64_t(s.num_sms) * s.ctas_per_sm;
  const int64_t work = int64_t(ws.fwd_row_tiles) * ws.num_tiles;
  const int64_t cluster = std::max(s.split_cluster, 1);
  double best = -1;
  for (int64_t per = 1; per <= ws.num_tiles; ++per) {
    int64_t splits = ceil_div(ceil_div(ws.num_tiles, per), cluster) * cluster;
    int64_t ctas = splits * ws.fwd_row_tiles;
    double efficiency = double(work) / double(ceil_div(ctas, slots) * slots * per);
    if (per < 4 && ws.num_tiles >= 4) efficiency *= 0.9;  // short CTAs: pipeline fill dominates
    if (efficiency > best + 1e-9) {
      best = efficiency;
      ws.tiles_per_split = int(per);
      ws.splits = int(splits);
    }
    if (per >= ws.num_tiles) break;
  }
}

}  // namespace

LinearCeWorkspace plan_linear_ce(const LinearCeShape& s) {
  if (s.segment_sizes.empty() || s.segment_sizes.size() > 4)
    throw std::invalid_argument("linear CE: 1 to 4 vocabulary segments");
  if (s.dim <= 0 || s.dim % 8 != 0)
    throw std::invalid_argument("linear CE: dim must be a positive multiple of 8");
  if (s.kl && (s.teacher_dim <= 0 || s.teacher_dim % 8 != 0))
    throw std::invalid_argument("linear CE: the teacher's dim must be a positive multiple of 8");
  LinearCeWorkspace ws;
  int64_t live = 0;
  for (int64_t v : s.segment_sizes) {
    if (v <= 0) throw std::invalid_argument("linear CE: empty vocabulary segment");
    ws.num_tiles += int(ceil_div(v, LinearCeWorkspace::kTileIds));
    live += v;
  }
  const int64_t nk = std::max<int64_t>(s.n_kept, 1);
  // The backward's products launch a grid row of CTAs per row tile (at most 65,535 rows).
  if (ceil_div(nk, LinearCeWorkspace::kTileRows) > 65535)
    throw std::invalid_argument(
        "linear CE: at most 8,388,480 kept rows per call (65,535 tiles of 128); split the batch");
  ws.row_tiles = int(ceil_div(nk, LinearCeWorkspace::kTileRows));
  ws.num_sms = s.num_sms;
  ws.fwd_row_tiles =
      int(ceil_div(nk, s.kl ? LinearCeWorkspace::kKlFwdRows : LinearCeWorkspace::kFwdRows));
  choose_splits(ws, s);

  for (int64_t v : s.segment_sizes) ws.colsum_parts += int(ceil_div(v, ws.colsum_rows_per_part));
  ws.colsum_parts += int(ceil_div(nk, ws.colsum_rows_per_part));

  int64_t off = 0;
  auto take = [&](WorkspaceSlice& slice, int64_t bytes) {
    slice.offset = off;
    slice.bytes = bytes;
    off += (bytes + 255) / 256 * 256;
  };
  // What the forward saves for the backward.
  take(ws.kept, 4 * std::max<int64_t>(s.n_rows, 1));
  take(ws.slot, 4 * std::max<int64_t>(s.n_rows, 1));
  take(ws.count, 4);
  take(ws.hidden_kept, 2 * nk * s.dim);  // E compacted to the kept rows
  take(ws.target_logit, 4 * nk);
  take(ws.target_raw, 4 * nk);
  take(ws.lse, 4 * nk);
  take(ws.row_loss, 4 * nk);
  take(ws.loss, 4);
  take(ws.saved_tile_class,
       s.filtering && s.backward ? int64_t(ws.row_tiles) * ws.num_tiles : 0);
  if (s.kl) {
    take(ws.teacher_hidden_kept, 2 * nk * s.teacher_dim);
    take(ws.tempered_lse, 4 * nk);
    take(ws.teacher_lse, 4 * nk);
    take(ws.teacher_target_logit, 4 * nk);
  }
  ws.saved_end = off;
  // The forward's scratch.
  take(ws.part_max, 4 * ws.splits * nk);
  take(ws.part_sum, 4 * ws.splits * nk);
  take(ws.part_zsum, s.smoothing ? 4 * ws.splits * nk : 0);
  // bf16 max logits per (tile, forward column warp, kept row): 2 x 2 bytes per (tile, row); the
  // KL forward merges its column warps: 2 bytes
  take(ws.tile_max, s.filtering ? (s.kl ? 2 : 4) * int64_t(ws.num_tiles) * nk : 0);
  if (s.kl) {
    take(ws.kl_parts, 4 * 5 * int64_t(ws.splits) * nk);
    take(ws.teacher_tile_max, s.filtering ? 2 * int64_t(ws.num_tiles) * nk : 0);
  }
  ws.forward_end = off;
  if (s.backward) {
    take(ws.row_grad, 4 * nk);
    take(ws.tile_class, int64_t(ws.row_tiles) * ws.num_tiles);
    take(ws.row_list, 4 * int64_t(ws.row_tiles) * ws.num_tiles);
    take(ws.row_count, 4 * int64_t(ws.row_tiles));
    take(ws.col_list, 4 * int64_t(ws.row_tiles) * ws.num_tiles);
    take(ws.col_count, 4 * int64_t(ws.num_tiles));
    take(ws.col_steps, 4 * int64_t(ws.num_tiles));
    take(ws.col_corrections, 4 * int64_t(ws.num_tiles));
    take(ws.pair_rank, 4 * int64_t(ws.row_tiles) * ws.num_tiles);
    take(ws.pair_first, 4 * (int64_t(ws.num_tiles) + 1));
    take(ws.staged_first, 4 * (int64_t(ws.num_tiles) + 1));
    take(ws.pair_list, 8 * int64_t(ws.row_tiles) * ws.num_tiles);
    take(ws.pair_visit, 4 * int64_t(ws.row_tiles) * ws.num_tiles);
    bool a = s.analytic_smoothing;
    take(ws.colsum_partial, a ? 4 * int64_t(ws.colsum_parts) * s.dim : 0);
    take(ws.weight_colsum, a ? 4 * s.dim : 0);
    take(ws.hidden_wsum, a ? 4 * s.dim : 0);
    take(ws.grad_sum, 4);
    take(ws.target_grad, s.filtering ? 4 * nk : 0);  // sparse target corrections
    take(ws.target_slot, s.filtering ? 4 * nk : 0);
  }
  ws.total_bytes = off;
  return ws;
}

std::string describe(const LinearCeWorkspace& ws) {
  std::ostringstream o;
  o << "row_tiles " << ws.row_tiles << ", tiles " << ws.num_tiles << ", splits " << ws.splits
    << " x " << ws.tiles_per_split << " tiles, workspace " << ws.total_bytes / (1 << 20)
    << " MiB (saved " << ws.saved_end / (1 << 20) << ", forward scratch "
    << (ws.forward_end - ws.saved_end) / (1 << 20) << ", tile max " << ws.tile_max.bytes / (1 << 20)
    << ")";
  return o.str();
}

CeBackwardPlan plan_backward_chunks(const std::vector<int32_t>& pairs,
                                    const std::vector<uint8_t>& staged, int64_t dim,
                                    int64_t budget_bytes) {
  if (pairs.size() != staged.size())
    throw std::invalid_argument("linear CE backward: one staged flag per vocabulary tile");
  CeBackwardPlan plan;
  const int64_t stage_bytes = staged_tile_bytes(dim);
  CeBackwardChunk chunk;
  int64_t bytes = 0;
  auto close = [&] {
    plan.chunks.push_back(chunk);
    plan.buffer_bytes = std::max(plan.buffer_bytes, bytes);
    plan.max_pairs = std::max(plan.max_pairs, chunk.pairs);
  };
  for (size_t t = 0; t < pairs.size(); ++t) {
    if (pairs[t] < 0) throw std::invalid_argument("linear CE backward: negative pair count");
    const int64_t need = pairs[t] * CeBackwardPlan::kGradBlockBytes + (staged[t] ? stage_bytes : 0);
    if (chunk.tiles > 0 &&
        (chunk.tiles == CeBackwardPlan::kMaxChunkTiles || bytes + need > budget_bytes)) {
      close();
      chunk = CeBackwardChunk{int(t), 0, 0, 0, 0};
      bytes = 0;
    }
    ++chunk.tiles;
    chunk.pairs += pairs[t];
    chunk.staged_tiles += staged[t] ? 1 : 0;
    chunk.visited_tiles += pairs[t] > 0 ? 1 : 0;
    bytes += need;
  }
  if (chunk.tiles > 0) close();
  plan.buffer_bytes = std::max<int64_t>(plan.buffer_bytes, 1);
  return plan;
}

}  // namespace tilejit
