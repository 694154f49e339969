// Buffer summaries: the value range of a captured buffer over a box of indices, answered in
// O(1) per row of the box without touching elements, for the interval evaluation of masks
// (compiler/IntervalEval.h).
//
// The compiler decides *which* axis of each buffer to summarise from the reads a mask makes
// (plan_buffer_summaries): the axis indexed by q or kv, in blocks of the tile size along it,
// so that a tile's index range covers whole blocks. A summary is built in one O(size) pass over
// host memory: per row of the other axes, the min/max of each block and a sparse table over the
// blocks, plus the running min/max from each block's start and to each block's end. A query is
// then exact in O(1): the partial blocks at its ends come from the running arrays, the whole
// blocks between from the sparse table; only a range strictly inside one block answers with
// that block's range (a superset: still sound). An index range that leaves the bound shape adds
// the 0 such reads return.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/IntervalEval.h"

namespace tilejit {

// Summarise `axis` in blocks of `granule` elements; the other axes are scanned row by row.
struct SummaryPlan {
  int axis = 0;
  int granule = 1;
};

// One plan per buffer the expression reads, from the Loads of `eval` and the tile sizes.
std::map<std::string, SummaryPlan, std::less<>> plan_buffer_summaries(const IntervalEval& eval,
                                                                      int block_q, int block_kv);

class BufferSummary {
 public:
  BufferSummary(const BufferView& view, const SummaryPlan& plan);

  // Values read at indices [lo[i], hi[i]] (one per axis, i32 ranges, lo <= hi).
  ValueRange range(const int64_t* lo, const int64_t* hi) const;
  size_t bytes() const;
  int granule() const { return granule_; }

 private:
  double element(const BufferView& view, const std::vector<int64_t>& index) const;
  void running_row(int64_t row, const std::vector<double>& values);
  // Adds the values of axis positions [i0, i1] (block range [b0, b1]) of one row to lo/hi.
  void query_row(int64_t row, int64_t i0, int64_t i1, double& lo, double& hi) const;
  void query_blocks(int64_t row, int64_t b0, int64_t b1, double& lo, double& hi) const;

  std::vector<int64_t> sizes_;
  int axis_ = 0;
  int granule_ = 1;
  int64_t rows_ = 0, blocks_ = 0;
  int levels_ = 0;
  std::vector<double> min_, max_;  // [(level * rows + row) * blocks + block]
  // [row * len + j]: min/max from the start of j's block to j, and from j to its block's end.
  std::vector<double> pre_min_, pre_max_, suf_min_, suf_max_;
  int64_t len_ = 1;
  double all_min_ = 0, all_max_ = 0;
  bool has_nan_ = false, is_int_ = true, empty_ = true;
};

// A LoadOracle answering each Load of an IntervalEval from its buffer's summary.
class SummaryOracle : public LoadOracle {
 public:
  // `summaries` by buffer name; must outlive the oracle.
  SummaryOracle(const IntervalEval& eval,
                const std::map<std::string, BufferSummary, std::less<>>& summaries);
  ValueRange range(int load, const int64_t* lo, const int64_t* hi) const override;

 private:
  std::vector<const BufferSummary*> by_load_;
};

}  // namespace tilejit
