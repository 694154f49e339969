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

// Fraction of the (row tile, vocabulary tile) pairs a filtered backward visits, and the point
// from which the backward stops filtering: when nearly every tile survives, skipping the few
// cold ones saves less than filtering costs (gathering weight rows through an order; in natural
// order the sparse target corrections and the classified lists: 1-4% measured on data where
// every tile survives), so the backward visits every tile in natural order, exactly as with
// filtering off.
inline constexpr double kDenseBackwardSurvival = 0.95;
double surviving_fraction(int64_t visited_tiles, int64_t total_tiles);
bool filter_backward(int64_t visited_tiles, int64_t total_tiles);

}  // namespace tilejit
