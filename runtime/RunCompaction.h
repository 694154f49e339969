// The host's part of the GPU classifier's compaction (runtime/MaskAnalysisGpu.cpp): the device
// counts each q-tile row's runs, the host turns the counts into offsets (an exclusive prefix
// sum, checked against the int32 offsets of runtime/BlockMask.h), the device writes every row's
// runs at its offset, and the compacted runs come back and are cut into rows for
// BlockMask::from_rows. O(rows + runs).
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "compiler/Error.h"
#include "runtime/BlockMask.h"

namespace tilejit {

// offsets[r] .. offsets[r + 1] for rows of `counts[r]` runs; `program` names the mask in the
// error when the runs exceed the block mask's int32 offsets.
inline std::vector<int32_t> run_offsets(const std::vector<int32_t>& counts,
                                        std::string_view program) {
  std::vector<int32_t> offsets(counts.size() + 1);
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = static_cast<int32_t>(total);
    TILEJIT_INTERNAL_CHECK(counts[r] >= 0, "row {} has {} runs", r, counts[r]);
    total += counts[r];
    TILEJIT_USER_CHECK(total <= std::numeric_limits<int32_t>::max(),
                       "the block mask of program '{}' has more than 2^31 - 1 runs", program);
  }
  offsets.back() = static_cast<int32_t>(total);
  return offsets;
}

// The run lists of the rows, runs[offsets[r] .. offsets[r + 1]) each.
inline std::vector<std::vector<TileRun>> split_rows(const std::vector<int32_t>& offsets,
                                                    const std::vector<TileRun>& runs) {
  std::vector<std::vector<TileRun>> rows(offsets.empty() ? 0 : offsets.size() - 1);
  for (size_t r = 0; r < rows.size(); ++r)
    rows[r].assign(runs.begin() + offsets[r], runs.begin() + offsets[r + 1]);
  return rows;
}

}  // namespace tilejit
