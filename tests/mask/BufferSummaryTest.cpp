// Buffer summaries against brute force: random buffers (ranks 0-3, i32 and f32 with NaNs,
// strided views), random plans and random index boxes, in and out of the bound shape. Every
// range must contain every value a read can produce (0 when an index leaves the shape); a
// query over one row that starts or ends on a block boundary must be exact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "compiler/BufferSummary.h"

namespace tilejit::testing {
namespace {

TEST(BufferSummary, RangesContainEveryReadAndAreExactWhenAligned) {
  std::mt19937_64 rng(5);
  int64_t exact_checked = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    int rank = static_cast<int>(rng() % 4);
    bool is_int = rng() % 2 == 0;
    std::vector<int64_t> sizes(rank);
    int64_t n = 1;
    for (int64_t& s : sizes) s = 1 + static_cast<int64_t>(rng() % (rank == 1 ? 70 : 9)), n *= s;
    // Column-major strides half of the time: summaries must follow the view's strides.
    std::vector<int64_t> strides(rank);
    bool column_major = rng() % 2 == 0;
    int64_t st = 1;
    for (int d = 0; d < rank; ++d) {
      int dd = column_major ? d : rank - 1 - d;
      strides[dd] = st;
      st *= sizes[dd];
    }
    std::vector<int32_t> ints(n);
    std::vector<float> floats(n);
    for (int64_t i = 0; i < n; ++i) {
      ints[i] = static_cast<int32_t>(rng() % 21) - 10;
      floats[i] = rng() % 40 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                  : static_cast<float>(static_cast<int>(rng() % 200) - 100) / 8;
    }
    BufferView view{is_int ? static_cast<const void*>(ints.data()) : floats.data(),
                    is_int ? ElemType::I32 : ElemType::F32, sizes, strides};
    SummaryPlan plan{rank == 0 ? 0 : static_cast<int>(rng() % rank),
                     1 + static_cast<int>(rng() % 9)};
    BufferSummary summary(view, plan);
    for (int q = 0; q < 20; ++q) {
      int64_t lo[3], hi[3];
      for (int d = 0; d < rank; ++d) {
        lo[d] = static_cast<int64_t>(rng() % (sizes[d] + 3)) - 2;
        hi[d] = lo[d] + static_cast<int64_t>(rng() % (d == plan.axis ? 30 : 3));
      }
      ValueRange r = summary.range(lo, hi);
      // Brute force over the box.
      double tlo = INFINITY, thi = -INFINITY;
      bool nan = false;
      int64_t idx[3] = {0, 0, 0};
      for (int d = 0; d < rank; ++d) idx[d] = lo[d];
      for (;;) {
        bool inside = true;
        int64_t off = 0;
        for (int d = 0; d < rank; ++d) {
          inside &= idx[d] >= 0 && idx[d] < sizes[d];
          off += idx[d] * strides[d];
        }
        double v = !inside ? 0.0 : is_int ? ints[off] : floats[off];
        if (std::isnan(v)) nan = true;
        else tlo = std::min(tlo, v), thi = std::max(thi, v);
        int d = rank - 1;
        for (; d >= 0; --d) {
          if (++idx[d] <= hi[d]) break;
          idx[d] = lo[d];
        }
        if (d < 0) break;
      }
      ASSERT_TRUE(!nan || r.may_nan) << "iter " << iter;
      if (tlo <= thi) {
        ASSERT_LE(r.lo, tlo) << "iter " << iter;
        ASSERT_GE(r.hi, thi) << "iter " << iter;
      }
      // Exactness: inside the shape, one row, a range starting on a block boundary.
      bool one_row = true, inside = true;
      for (int d = 0; d < rank; ++d) {
        inside &= lo[d] >= 0 && hi[d] < sizes[d];
        if (d != plan.axis) one_row &= lo[d] == hi[d];
      }
      if (rank > 0 && inside && one_row && lo[plan.axis] % plan.granule == 0 && !nan &&
          n <= (int64_t{1} << 16) && tlo <= thi) {
        EXPECT_EQ(r.lo, tlo) << "iter " << iter;
        EXPECT_EQ(r.hi, thi) << "iter " << iter;
        ++exact_checked;
      }
    }
  }
  EXPECT_GT(exact_checked, 1000);
}

}  // namespace
}  // namespace tilejit::testing
