// The interval lowering of a mask to CUDA: the second interpretation of the same IR, for tile
// classification on the GPU (kernels_templates/classify_tiles.cuh). Where the elementwise
// hooks (CudaCodegen.h) compute a mask at one point, this computes it over a tile's box:
// i32 nodes become TjIv (interval + exact affine form), bool nodes TjTri, f32 nodes TjFv
// (untracked). One SSA line per node, in post-order, each calling a device function of the template:
//
//   struct TjIntervalProgram {
//     __device__ static TjTri mask_box(const TjArgs& a, const TjSummaries& s, const TjBox& box) {
//       const TjIv t0 = tj_iv_var(box, 2);  // q
//       const TjIv t1 = tj_iv_var(box, 3);  // kv
//       const TjTri t2 = tj_iv_cmp<kTjGe>(t0, t1, box);  // q >= kv
//       return t2;
//     }
//   };
//
// i32 buffers the mask reads are answered by summaries (TjSummaries, one TjSummary per buffer,
// a range table built by the generated tj_summarise_* entry points, level 0, and
// tj_summary_level_*, each level above). The classifier entry bisects the kv tiles of each
// q-tile row (kernels_templates/row_bisection.cuh) in two passes, runs counted then compacted.
#pragma once

#include <string>
#include <vector>

#include "compiler/Program.h"
#include "compiler/codegen/CudaCodegen.h"

namespace tilejit {

struct ClassifySource {
  // entry: the classifier, tj_classify_rows_<hash16>(ClassifyRowsParams, TjArgs, TjSummaries)
  CudaSource cuda;
  // One per summarised buffer, in TjSummaries member order: the buffer's declared name and the
  // entry point tj_summarise_<hash16>_<k>(SummariseParams, TjArgs) that builds level 0 of its
  // range table.
  std::vector<std::string> summarised_buffers;
  std::vector<std::string> summarise_entries;
  // tj_summary_level_<hash16>(SummaryLevelParams): one level of a range table from the level
  // below; empty when no buffer is summarised.
  std::string summary_level_entry;
};

// The mask's interval function alone (the TjSummaries struct and TjIntervalProgram).
std::string generate_interval_hooks(const AttentionProgram& prog);

// The whole translation unit for a (validated, simplified) program.
ClassifySource generate_classify_tiles(const AttentionProgram& prog);

}  // namespace tilejit
