// Host-side logic of the vocabulary order (runtime/LinearCe.h "Vocabulary order"): a segment's
// visiting order from per-id scores, its inverse (which also checks a caller's order), and the
// backward's choice between the forward's order and every tile in natural order. Plain C++: no
// CUDA, no device calls (the GPU harness tests/gpu/linear_ce_harness.cu links it as well).
#pragma once

#include <cstdint>
#include <vector>

namespace tilejit {

// The rows 0..n-1 of a segment in visiting order: highest score first; equal scores (+0 and -0
// alike) by ascending row; NaN scores last, by row. O(n) (a stable radix sort); deterministic.
std::vector<int32_t> order_by_score(const float* scores, int64_t n);

// rank[order[p]] = p. std::invalid_argument naming the first offending position unless `order`
// is a permutation of 0..order.size()-1.
std::vector<int32_t> inverse_order(const std::vector<int32_t>& order);

// The moves that put rows stored by position into weight-row order in place: row p's content
// belongs at row order[p]. The permutation's cycles of two or more rows (fixed points need no
// move), in stretches of consecutive elements x, order[x], order[order[x]], ..., cut into runs of
// at most `run` elements, so that the runs can move concurrently: once every run's first row is
// saved aside, run r moves the content of rows[j] to rows[j + 1] from its last element back to
// its first (its last's to next[r], the element after it in its cycle, which begins another
// run; its first's from the saved copy). Each row is written once, by one run, and read before
// that by the same run, or saved aside. O(n); std::invalid_argument unless `order` is a
// permutation and run >= 1.
struct RowCycles {
  std::vector<int32_t> rows;   // the cycles' elements, run after run
  std::vector<int32_t> first;  // runs + 1 entries: run r is rows[first[r]], ..., rows[first[r+1]-1]
  std::vector<int32_t> next;   // per run: the row its last element's content moves to
  int32_t runs() const { return static_cast<int32_t>(next.size()); }
};
RowCycles position_cycles(const std::vector<int32_t>& order, int32_t run);

// Fraction of the (row tile, vocabulary tile) pairs a filtered backward visits, and the points
// from which the backward stops filtering and visits every tile in natural order, exactly as
// with filtering off. Measured on an H200 (four heads, zipf data, bench/NOTES.md): a backward in
// natural order costs about the surviving fraction s of the unfiltered one, plus 1-4% for the
// sparse target corrections and classified lists when every tile survives; one in a
// vocabulary order costs about 0.07 + 1.31 s of it (gathered weight rows; hot tiles bunched at
// the front of each segment), so an order pays only below s ~ 0.7.
inline constexpr double kNaturalBackwardSurvival = 0.95;
inline constexpr double kOrderedBackwardSurvival = 0.65;
double surviving_fraction(int64_t visited_tiles, int64_t total_tiles);
// Whether a backward whose tiles followed (`ordered`) or not a vocabulary order keeps filtering.
bool filter_backward(int64_t visited_tiles, int64_t total_tiles, bool ordered);

}  // namespace tilejit
