// Host-side sizing for the fused linear cross-entropy kernels (kernels_templates/linear_ce_*.cuh):
// tile counts, the forward's vocabulary split, the byte layout of the one workspace allocation
// they share, and the backward's vocabulary chunks. Plain C++: no CUDA, no device calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tilejit {

struct LinearCeShape {
  int64_t n_rows = 0;  // rows of E, ignored ones included
  int64_t n_kept = 0;  // rows whose target is not ignore_index
  int64_t dim = 0;
  std::vector<int64_t> segment_sizes;
  int num_sms = 132;
  int ctas_per_sm = 1;              // resident forward CTAs per SM (256 x 128 tiles)
  bool filtering = false;           // record tile maxima in the forward
  bool smoothing = false;           // label smoothing: per-split sums of logits
  bool analytic_smoothing = false;  // identity logit_mod + smoothing: column-sum vectors
  bool backward = true;
  bool kl = false;          // a KL term: the teacher's rows, statistics and tile maxima
  int split_cluster = 1;    // the forward's splits come in clusters of this many (a multiple)
  int64_t teacher_dim = 0;  // D_t (KL)
};

// A sub-allocation of the workspace: byte offset and size.
struct WorkspaceSlice {
  int64_t offset = 0, bytes = 0;
};

struct LinearCeWorkspace {
  static constexpr int kTileRows = 128, kTileIds = 128;
  static constexpr int kFwdRows = 256, kKlFwdRows = 128;  // forward CTA rows without / with KL
  int row_tiles = 0, num_tiles = 0;                       // gradient tiles: 128 rows x 128 ids
  int num_sms = 0;                      // the shape's: the persistent kernels' grids
  int fwd_row_tiles = 0;                // forward: 256 rows (128 with a KL term)
  int splits = 1, tiles_per_split = 1;  // forward grid: fwd_row_tiles x splits
  int colsum_parts = 0;                 // analytic smoothing: row blocks of the weights
  int64_t colsum_rows_per_part = 512;
  // Three regions, in this order, each its own allocation at run time (offsets are from the
  // start of the first; a slice's address is its region's base + offset - the region's start):
  //   [0, saved_end): what the forward keeps for the backward (the state's);
  //   [saved_end, forward_end): the forward's scratch, freed when the forward returns;
  //   [forward_end, total_bytes): the backward's scratch.
  // The forward saved: the kept rows and E's compacted copy, the rows' statistics and, with
  // filtering and a backward, the (row tile, vocabulary tile) classes it derives from the tile
  // maxima at its end (linear_ce_classify; tile_class below is the backward's own, for an
  // unfiltered pass).
  WorkspaceSlice kept, slot, count, hidden_kept, target_logit, target_raw, lse, row_loss, loss,
      saved_tile_class;
  // ... KL term: the teacher's kept rows, the two lse vectors, the teacher's target logits
  WorkspaceSlice teacher_hidden_kept, tempered_lse, teacher_lse, teacher_target_logit;
  // The forward's scratch: the splits' partials, the tile maxima (bf16), the KL term's five
  // [splits, n_kept] partials (tempered max and sum, teacher max and sum, cross) and the
  // teacher's tile maxima (one bf16 per tile and row, as the student's then are)
  WorkspaceSlice part_max, part_sum, part_zsum, tile_max, kl_parts, teacher_tile_max;
  // backward (its G blocks and staged weight rows are a buffer of their own: CeBackwardPlan)
  WorkspaceSlice row_grad, tile_class, row_list, row_count, col_list, col_count, col_steps,
      col_corrections, pair_rank, pair_first, staged_first, pair_list, pair_visit, colsum_partial, weight_colsum,
      hidden_wsum, grad_sum, target_grad, target_slot;
  int64_t saved_end = 0, forward_end = 0, total_bytes = 0;
};

// The address of `slice` in the region that starts at `region_start` (saved_end, forward_end or
// 0) and was allocated at `base`; nullptr for an empty slice.
inline void* slice_address(void* base, int64_t region_start, const WorkspaceSlice& slice) {
  return slice.bytes ? static_cast<char*>(base) + (slice.offset - region_start) : nullptr;
}

// Sizes everything for `shape`; throws std::invalid_argument on an unsupported shape (more
// than 4 segments, dim not a multiple of 8, an empty segment).
LinearCeWorkspace plan_linear_ce(const LinearCeShape& shape);

// One line per slice, for logs.
std::string describe(const LinearCeWorkspace& ws);

// The backward's vocabulary chunks (kernels_templates/linear_ce_bwd.cuh "G"): runs of tiles, in
// order, each holding at most kMaxChunkTiles tiles whose visited pairs' G blocks
// (kGradBlockBytes each) and staged weight tiles (staged_tile_bytes(dim) each, after the blocks)
// fit the budget together. A tile that needs more on its own gets a chunk of its own, and the
// buffer grows to hold it. Every tile is in exactly one chunk, visited or not (the chunk writes
// its dC rows).
struct CeBackwardChunk {
  int first_tile = 0, tiles = 0;
  int64_t pairs = 0, staged_tiles = 0;
  int visited_tiles = 0;  // tiles with a visited pair (the others: linear_ce_dweight_cold)
};
struct CeBackwardPlan {
  static constexpr int kMaxChunkTiles = 1024;  // dE's per-CTA list of a chunk's tiles
  static constexpr int64_t kGradBlockBytes = 128 * 128 * 2;
  std::vector<CeBackwardChunk> chunks;
  int64_t buffer_bytes = 0;  // the largest chunk's (at least 1)
  int64_t max_pairs = 0;     // the most pairs in a chunk
};
inline int64_t staged_tile_bytes(int64_t dim) {
  return int64_t(LinearCeWorkspace::kTileIds) * dim * 2;
}

// `pairs[t]`: vocabulary tile t's visited row tiles; `staged[t]`: whether its weight rows are
// staged (nonzero). Throws std::invalid_argument on mismatched sizes or a negative count.
CeBackwardPlan plan_backward_chunks(const std::vector<int32_t>& pairs,
                                    const std::vector<uint8_t>& staged, int64_t dim,
                                    int64_t budget_bytes);

}  // namespace tilejit
