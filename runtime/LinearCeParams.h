// Host mirrors of the fused linear cross-entropy kernels' launch parameters
// (kernels_templates/linear_ce_*.cuh), as runtime/LinearCe.cpp and LinearCeBackward.cpp fill
// them. Their sizes are asserted here and, on the device side, in every generated module
// (compiler/codegen/LossKernels.h), so the two layouts cannot drift apart unnoticed. Private to
// those files.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "compiler/codegen/LossKernels.h"
#include "runtime/LinearCeWorkspace.h"

namespace tilejit::linear_ce {

constexpr int kMaxSegments = 4;
constexpr int kTileIds = LinearCeWorkspace::kTileIds;
constexpr int kTileRows = LinearCeWorkspace::kTileRows;
constexpr int kIgnoredTarget = -1;  // linear_ce_rows.cuh

struct CeSegment {
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* d_weight = nullptr;  // fp32, or E's 16-bit type where d_weight_16
  float* d_bias = nullptr;
  const int32_t* order = nullptr;  // vocabulary order: position -> weight row (VocabOrder.h)
  const int32_t* rank = nullptr;   // weight row -> position
  long long weight_stride = 0, d_weight_stride = 0;
  int32_t begin = 0, size = 0, first_tile = 0, d_weight_16 = 0;
  int32_t weights_by_position = 0, d_weight_by_position = 0;  // the backward's, with an order
};
struct CeLayout {
  CeSegment seg[kMaxSegments];
  int32_t num_segments = 0, num_tiles = 0, live_ids = 0;
};
struct CeRows {
  const void* hidden = nullptr;
  long long hidden_stride = 0;
  const int32_t* kept = nullptr;
  const int32_t* targets = nullptr;
  int32_t n_kept = 0, dim = 0;
};
struct CeTeacher {
  CeLayout layout;
  const void* hidden = nullptr;
  long long hidden_stride = 0;
  int32_t dim = 0;
  float inv_temperature = 1;
  int32_t shared_weights = 0;  // bit s: segment s's teacher weight rows are the student's
};
struct CeKlForward {
  CeTeacher teacher;
  float *tempered_max = nullptr, *tempered_sum = nullptr, *teacher_max = nullptr,
        *teacher_sum = nullptr, *cross = nullptr, *teacher_target_logit = nullptr;
  uint16_t* teacher_tile_max = nullptr;
};
struct CeKlMerge {
  const float *tempered_max = nullptr, *tempered_sum = nullptr, *teacher_max = nullptr,
              *teacher_sum = nullptr, *cross = nullptr;
  float *tempered_lse = nullptr, *teacher_lse = nullptr;
  float alpha = 0, temperature = 1;
};
struct CeKlBackward {
  CeTeacher teacher;
  const float *tempered_lse = nullptr, *teacher_lse = nullptr, *teacher_target_logit = nullptr;
  float weight = 0;
};
struct CeFwdParams {
  CeLayout layout;
  CeRows rows;
  float *part_max = nullptr, *part_sum = nullptr, *part_zsum = nullptr;
  float *target_logit = nullptr, *target_raw = nullptr;
  uint16_t* tile_max = nullptr;  // bf16 [num_tiles, 2 column warps, n_kept] (KL: 1 part)
  int32_t tiles_per_split = 1;
  int32_t weights_in_position_order = 0;  // bit s: the weight map of segment s is over a copy
  int32_t split_cluster = 1;              // CTAs per cluster along the splits (KL, Hopper loop)
  int32_t row_group = 0;                  // row tiles per group of the grid's order (0: none)
  CeKlForward kl;
};
struct CeMergeParams {
  CeKlMerge kl;
  const float *part_max = nullptr, *part_sum = nullptr, *part_zsum = nullptr;
  const float* target_logit = nullptr;
  const int32_t* slot = nullptr;
  float *lse = nullptr, *row_loss = nullptr, *loss_rows = nullptr;
  int32_t n_rows = 0, n_kept = 0, splits = 1, live_ids = 1;
  float label_smoothing = 0, z_loss = 0;
};
struct CeClassifyParams {
  CeLayout layout;
  const int32_t *kept = nullptr, *targets = nullptr;
  const float* lse = nullptr;
  const uint16_t* tile_max = nullptr;
  unsigned char* tile_class = nullptr;
  int32_t n_kept = 0, tile_max_parts = 2;
  float log_threshold = 0;
  int32_t ce_probs = 1;
  const uint16_t* teacher_tile_max = nullptr;
  const float *tempered_lse = nullptr, *teacher_lse = nullptr;
  float inv_temperature = 1;
};
struct CeBwdParams {
  CeLayout layout;
  CeRows rows;
  const float *lse = nullptr, *target_logit = nullptr, *target_raw = nullptr, *row_grad = nullptr;
  float* target_grad = nullptr;
  int32_t* target_slot = nullptr;
  const unsigned char* tile_class = nullptr;
  const int32_t *row_list = nullptr, *row_count = nullptr, *col_list = nullptr,
                *col_count = nullptr, *col_steps = nullptr, *col_corrections = nullptr,
                *pair_rank = nullptr, *pair_first = nullptr, *staged_first = nullptr,
                *pair_list = nullptr,  // pair_list: int2 pairs
                *pair_visit = nullptr;
  int32_t* item_counter = nullptr;
  void* grad = nullptr;
  float* d_hidden = nullptr;
  long long d_hidden_stride = 0;
  const float *weight_colsum = nullptr, *hidden_wsum = nullptr, *grad_sum = nullptr;
  int32_t num_row_tiles = 0, chunk_first = 0, chunk_tiles = 0, first_chunk = 1;
  float prob_weight = 1, target_weight = 1, uniform = 0, z_loss = 0;
  CeKlBackward kl;
};
static_assert(sizeof(CeLayout) == kCeLayoutBytes);
static_assert(sizeof(CeFwdParams) == kCeFwdParamsBytes);
struct CeFwdMaps {  // the Hopper forward's tensor maps (runtime/LinearCeTma.h)
  CUtensorMap hidden;
  CUtensorMap weight[kMaxSegments];
};
static_assert(sizeof(CeFwdMaps) == kCeFwdMapsBytes);
struct CeKlMaps {  // the Hopper KL forward's tensor maps (runtime/LinearCeTma.h)
  CUtensorMap hidden, teacher_hidden;
  CUtensorMap weight[kMaxSegments], teacher_weight[kMaxSegments];
};
static_assert(sizeof(CeKlMaps) == kCeKlMapsBytes);
struct CeBwdMaps {  // the Hopper products' tensor maps (runtime/LinearCeTma.h)
  CUtensorMap grad, hidden, staged;
  CUtensorMap weight[kMaxSegments];
};
static_assert(sizeof(CeBwdMaps) == kCeBwdMapsBytes);
static_assert(sizeof(CeMergeParams) == kCeMergeParamsBytes);
static_assert(sizeof(CeClassifyParams) == kCeClassifyParamsBytes);
static_assert(sizeof(CeBwdParams) == kCeBwdParamsBytes);

}  // namespace tilejit::linear_ce
