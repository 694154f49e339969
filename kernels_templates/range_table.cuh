// Range tables: the min / max of any range of blocks of a summarised buffer row in O(1), for the
// GPU tile classifier (classify_tiles.cuh), which evaluates masks over boxes of many kv tiles.
// A sparse table over the per-block min / max: level L holds, for each block k, the range of
// blocks [k, k + 2^L); a query over [b0, b1] merges two overlapping entries of one level. Built
// in O(blocks log blocks) per row, one level after the other (each entry from two of the level
// below), so a GPU builds a level with one thread per entry.
//
// Layout: entry (level L, row r, block k) at index (L * rows + r) * blocks + k. Entries with
// k + 2^L > blocks are never written nor read.
//
// Shared by the device and the host (the host tests run the same code, see
// tests/mask/RowBisectionTest.cpp): no includes, plain C++ apart from the qualifiers. Values are
// finite or +-inf (the summaries of i32 buffers), never NaN, so plain comparisons order them.
#pragma once

#ifndef TJ_HOST_DEVICE
#if defined(__CUDACC__)
#define TJ_HOST_DEVICE __host__ __device__
#else
#define TJ_HOST_DEVICE
#endif
#endif

namespace tjk {

// floor(log2(n)) for n >= 1.
TJ_HOST_DEVICE inline int tj_floor_log2(long long n) {
#if defined(__CUDA_ARCH__)
  return 63 - __clzll(n);
#else
  return 63 - __builtin_clzll(static_cast<unsigned long long>(n));
#endif
}

// Levels of a table over `blocks` blocks (at least 1): the largest L with 2^L <= blocks, plus 1.
TJ_HOST_DEVICE inline int tj_range_levels(long long blocks) {
  return blocks < 1 ? 1 : tj_floor_log2(blocks) + 1;
}

// Builds entry `i` (row i / blocks, block i % blocks) of `level` >= 1 from level - 1.
TJ_HOST_DEVICE inline void tj_range_table_entry(double* mn, double* mx, long long rows,
                                                long long blocks, int level, long long i) {
  long long half = 1LL << (level - 1), k = i % blocks, row = i / blocks;
  if (k + 2 * half > blocks) return;
  long long below = ((level - 1) * rows + row) * blocks + k;
  long long at = (level * rows + row) * blocks + k;
  double a = mn[below], b = mn[below + half];
  mn[at] = a < b ? a : b;
  a = mx[below];
  b = mx[below + half];
  mx[at] = a > b ? a : b;
}

// Merges the min / max of blocks [b0, b1] (0 <= b0 <= b1 < blocks) of `row` into lo / hi.
TJ_HOST_DEVICE inline void tj_range_query(const double* mn, const double* mx, long long rows,
                                          long long blocks, long long row, long long b0,
                                          long long b1, double& lo, double& hi) {
  int level = tj_floor_log2(b1 - b0 + 1);
  long long base = (level * rows + row) * blocks;
  long long second = b1 - (1LL << level) + 1;
  double a = mn[base + b0], b = mn[base + second];
  double m = a < b ? a : b;
  if (m < lo) lo = m;
  a = mx[base + b0];
  b = mx[base + second];
  m = a > b ? a : b;
  if (m > hi) hi = m;
}

}  // namespace tjk
