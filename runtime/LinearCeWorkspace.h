// Host-side sizing for the fused linear cross-entropy kernels (kernels_templates/linear_ce_*.cuh):
// tile counts, the forward's vocabulary split, the backward's vocabulary chunking, and the byte
// layout of the one workspace allocation they share. Plain C++: no CUDA, no device calls.
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
  int ctas_per_sm = 1;                    // resident forward CTAs per SM (256 x 128 tiles)
  int64_t grad_buffer_bytes = 512 << 20;  // bound on the backward's staging buffers (below)
  // The backward stages each chunk's weight rows of ordered segments for the Hopper dE product
  // (kernels_templates/linear_ce_order.cuh): a buffer of chunk ids x dim beside G's, within
  // grad_buffer_bytes.
  bool stage_weights = false;
  bool filtering = false;                 // record tile maxima in the forward
  bool smoothing = false;                 // label smoothing: per-split sums of logits
  bool analytic_smoothing = false;        // identity logit_mod + smoothing: column-sum vectors
  bool backward = true;
  bool kl = false;          // a KL term: the teacher's rows, statistics and tile maxima
  int64_t teacher_dim = 0;  // D_t (KL)
};

// A sub-allocation of the workspace: byte offset and size.
struct WorkspaceSlice {
  int64_t offset = 0, bytes = 0;
};

struct LinearCeWorkspace {
  static constexpr int kTileRows = 128, kTileIds = 128, kMaxChunkTiles = 1024;
  static constexpr int kFwdRows = 256, kKlFwdRows = 128;  // forward CTA rows without / with KL
  int row_tiles = 0, num_tiles = 0;     // gradient tiles: 128 rows x 128 ids
  int fwd_row_tiles = 0;                // forward: 256 rows (128 with a KL term)
  int splits = 1, tiles_per_split = 1;  // forward grid: fwd_row_tiles x splits
  int chunk_tiles = 0, num_chunks = 0;  // backward: vocabulary tiles per chunk
  int colsum_parts = 0;                 // analytic smoothing: row blocks of the weights
  int64_t colsum_rows_per_part = 512;
  // forward
  WorkspaceSlice kept, slot, count, hidden_kept, part_max, part_sum, part_zsum, target_logit,
      target_raw, lse, row_loss, tile_max, loss;
  // forward, KL term: the teacher's kept rows, five [splits, n_kept] partials (tempered max and
  // sum, teacher max and sum, cross), the two lse vectors, the teacher's target logits and tile
  // maxima (one bf16 per tile and row, as the student's then are)
  WorkspaceSlice teacher_hidden_kept, kl_parts, tempered_lse, teacher_lse, teacher_target_logit,
      teacher_tile_max;
  // backward
  WorkspaceSlice row_grad, tile_class, row_list, row_count, col_list, col_count, grad,
      staged_weights, colsum_partial, weight_colsum, hidden_wsum, grad_sum, target_grad,
      target_slot;
  int64_t total_bytes = 0;
  int64_t grad_stride = 0;  // elements per staged G row
};

// Sizes everything for `shape`; throws std::invalid_argument on an unsupported shape (more
// than 4 segments, dim not a multiple of 8, an empty segment).
LinearCeWorkspace plan_linear_ce(const LinearCeShape& shape);

// One line per slice, for logs.
std::string describe(const LinearCeWorkspace& ws);

}  // namespace tilejit
