#include "compiler/BufferSummary.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "compiler/Error.h"

namespace tilejit {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Bounds on a summary's size: coarser blocks are still sound, only less precise.
constexpr int64_t kMaxBlocksPerRow = int64_t{1} << 16;
constexpr int64_t kMaxBlocks = int64_t{1} << 22;
// Queries spanning more rows than this answer with the whole buffer's range.
constexpr int64_t kMaxRowsPerQuery = 64;
// Buffers up to this many elements also get the running arrays that make queries exact.
constexpr int64_t kMaxRunningElements = int64_t{1} << 25;

double decode_f16(uint16_t h) {
  int sign = (h >> 15) & 1, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double v;
  if (exponent == 0)
    v = std::ldexp(mantissa, -24);
  else if (exponent == 31)
    v = mantissa ? std::numeric_limits<double>::quiet_NaN() : kInf;
  else
    v = std::ldexp(mantissa + 1024, exponent - 25);
  return sign ? -v : v;
}

double decode_bf16(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

}  // namespace

std::map<std::string, SummaryPlan, std::less<>> plan_buffer_summaries(const IntervalEval& eval,
                                                                      int block_q, int block_kv) {
  struct Axes {
    std::vector<int> tile;  // per axis: gcd of the tile sizes of the q / kv reads (0: none)
  };
  std::map<std::string, Axes, std::less<>> seen;
  for (const Expr& load : eval.loads()) {
    Axes& a = seen[load->name];
    a.tile.resize(load.num_args(), 0);
    for (size_t i = 0; i < load.num_args(); ++i) {
      if (ir::uses_var(load.arg(i), var::q)) a.tile[i] = std::gcd(a.tile[i], block_q);
      if (ir::uses_var(load.arg(i), var::kv)) a.tile[i] = std::gcd(a.tile[i], block_kv);
    }
  }
  std::map<std::string, SummaryPlan, std::less<>> plans;
  for (const auto& [name, a] : seen) {
    SummaryPlan p;
    p.axis = a.tile.empty() ? 0 : static_cast<int>(a.tile.size()) - 1;
    for (size_t i = 0; i < a.tile.size(); ++i)
      if (a.tile[i] > 0) {
        p.axis = static_cast<int>(i);
        p.granule = a.tile[i];
        break;
      }
    plans[name] = p;
  }
  return plans;
}

double BufferSummary::element(const BufferView& view, const std::vector<int64_t>& index) const {
  int64_t offset = 0, stride = 1;
  for (size_t d = sizes_.size(); d-- > 0;) {
    offset += index[d] * (view.strides.empty() ? stride : view.strides[d]);
    stride *= sizes_[d];
  }
  const char* p = static_cast<const char*>(view.data) + offset * elem_size(view.elem);
  switch (view.elem) {
    case ElemType::I32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case ElemType::F32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case ElemType::BF16:
    case ElemType::F16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof v);
      return view.elem == ElemType::BF16 ? decode_bf16(v) : decode_f16(v);
    }
  }
  return 0;
}

BufferSummary::BufferSummary(const BufferView& view, const SummaryPlan& plan)
    : sizes_(view.sizes), axis_(plan.axis), granule_(std::max(1, plan.granule)) {
  is_int_ = view.elem == ElemType::I32;
  int rank = static_cast<int>(sizes_.size());
  TILEJIT_INTERNAL_CHECK(rank == 0 || (axis_ >= 0 && axis_ < rank), "summary axis {} of rank {}",
                         axis_, rank);
  int64_t numel = 1;
  for (int64_t s : sizes_) numel *= s;
  if (numel == 0) return;  // every read is out of shape
  empty_ = false;
  int64_t len = rank == 0 ? 1 : sizes_[axis_];
  len_ = len;
  rows_ = numel / len;
  bool running = numel <= kMaxRunningElements;
  auto blocks_for = [&](int64_t g) { return (len + g - 1) / g; };
  while (blocks_for(granule_) > 1 &&
         (blocks_for(granule_) > kMaxBlocksPerRow || rows_ * blocks_for(granule_) > kMaxBlocks))
    granule_ *= 2;
  blocks_ = blocks_for(granule_);
  levels_ = 1;
  while ((int64_t{1} << levels_) <= blocks_) ++levels_;
  min_.assign(static_cast<size_t>(levels_ * rows_ * blocks_), kInf);
  max_.assign(min_.size(), -kInf);
  std::vector<double> values;
  if (running) {
    values.resize(static_cast<size_t>(len));
    for (auto* v : {&pre_min_, &suf_min_}) v->assign(static_cast<size_t>(numel), kInf);
    for (auto* v : {&pre_max_, &suf_max_}) v->assign(static_cast<size_t>(numel), -kInf);
  }
  all_min_ = kInf;
  all_max_ = -kInf;

  // One pass over the elements: row by row (the other axes, row-major), along the axis.
  std::vector<int64_t> index(rank, 0);
  for (int64_t row = 0; row < rows_; ++row) {
    int64_t rest = row;
    for (int d = rank - 1; d >= 0; --d) {
      if (d == axis_) continue;
      index[d] = rest % sizes_[d];
      rest /= sizes_[d];
    }
    double* mn = &min_[static_cast<size_t>(row * blocks_)];
    double* mx = &max_[static_cast<size_t>(row * blocks_)];
    for (int64_t j = 0; j < len; ++j) {
      if (rank > 0) index[axis_] = j;
      double v = element(view, index);
      if (running) values[j] = v;
      if (std::isnan(v)) {
        has_nan_ = true;
        continue;
      }
      int64_t blk = j / granule_;
      mn[blk] = std::min(mn[blk], v);
      mx[blk] = std::max(mx[blk], v);
    }
    if (running) running_row(row, values);
    for (int64_t blk = 0; blk < blocks_; ++blk) {
      all_min_ = std::min(all_min_, mn[blk]);
      all_max_ = std::max(all_max_, mx[blk]);
    }
  }
  // Sparse table: level L holds the range of blocks [k, k + 2^L).
  for (int L = 1; L < levels_; ++L) {
    int64_t half = int64_t{1} << (L - 1);
    for (int64_t row = 0; row < rows_; ++row) {
      size_t at = static_cast<size_t>((L * rows_ + row) * blocks_);
      size_t below = static_cast<size_t>(((L - 1) * rows_ + row) * blocks_);
      for (int64_t k = 0; k + 2 * half <= blocks_; ++k) {
        min_[at + k] = std::min(min_[below + k], min_[below + k + half]);
        max_[at + k] = std::max(max_[below + k], max_[below + k + half]);
      }
    }
  }
}

void BufferSummary::running_row(int64_t row, const std::vector<double>& values) {
  size_t base = static_cast<size_t>(row * len_);
  double lo = kInf, hi = -kInf;
  for (int64_t j = 0; j < len_; ++j) {
    if (j % granule_ == 0) lo = kInf, hi = -kInf;
    if (!std::isnan(values[j])) lo = std::min(lo, values[j]), hi = std::max(hi, values[j]);
    pre_min_[base + j] = lo;
    pre_max_[base + j] = hi;
  }
  for (int64_t j = len_ - 1; j >= 0; --j) {
    if (j == len_ - 1 || (j + 1) % granule_ == 0) lo = kInf, hi = -kInf;
    if (!std::isnan(values[j])) lo = std::min(lo, values[j]), hi = std::max(hi, values[j]);
    suf_min_[base + j] = lo;
    suf_max_[base + j] = hi;
  }
}

void BufferSummary::query_row(int64_t row, int64_t i0, int64_t i1, double& lo, double& hi) const {
  int64_t b0 = i0 / granule_, b1 = i1 / granule_;
  if (!pre_min_.empty()) {
    size_t base = static_cast<size_t>(row * len_);
    bool starts = i0 % granule_ == 0;
    bool ends = i1 == len_ - 1 || (i1 + 1) % granule_ == 0;
    if (b0 == b1 && !starts && !ends) return query_blocks(row, b0, b0, lo, hi);
    if (b0 == b1 && starts) {
      lo = std::min(lo, pre_min_[base + i1]);
      hi = std::max(hi, pre_max_[base + i1]);
      return;
    }
    lo = std::min({lo, suf_min_[base + i0]});
    hi = std::max({hi, suf_max_[base + i0]});
    if (b0 == b1) return;
    lo = std::min(lo, pre_min_[base + i1]);
    hi = std::max(hi, pre_max_[base + i1]);
    if (b0 + 1 <= b1 - 1) query_blocks(row, b0 + 1, b1 - 1, lo, hi);
    return;
  }
  query_blocks(row, b0, b1, lo, hi);
}

void BufferSummary::query_blocks(int64_t row, int64_t b0, int64_t b1, double& lo,
                                 double& hi) const {
  int L = std::bit_width(static_cast<uint64_t>(b1 - b0 + 1)) - 1;
  size_t base = static_cast<size_t>((L * rows_ + row) * blocks_);
  int64_t second = b1 - (int64_t{1} << L) + 1;
  lo = std::min({lo, min_[base + b0], min_[base + second]});
  hi = std::max({hi, max_[base + b0], max_[base + second]});
}

ValueRange BufferSummary::range(const int64_t* lo, const int64_t* hi) const {
  if (empty_) return {0, 0, false};
  int rank = static_cast<int>(sizes_.size());
  bool outside = false, none_inside = false;
  constexpr int kMaxRank = 8;
  if (rank > kMaxRank) return {std::min(all_min_, 0.0), std::max(all_max_, 0.0), has_nan_};
  int64_t clo[kMaxRank], chi[kMaxRank], index[kMaxRank];
  int64_t rows_in_box = 1;
  for (int d = 0; d < rank; ++d) {
    if (lo[d] < 0 || hi[d] >= sizes_[d]) outside = true;
    clo[d] = std::max<int64_t>(lo[d], 0);
    chi[d] = std::min<int64_t>(hi[d], sizes_[d] - 1);
    if (clo[d] > chi[d])
      none_inside = true;
    else if (d != axis_)
      rows_in_box *= chi[d] - clo[d] + 1;
  }
  if (none_inside) return {0, 0, false};
  double vlo = kInf, vhi = -kInf;
  if (rows_in_box > kMaxRowsPerQuery) {
    vlo = all_min_;
    vhi = all_max_;
  } else {
    int64_t i0 = rank == 0 ? 0 : clo[axis_], i1 = rank == 0 ? 0 : chi[axis_];
    // Odometer over the other axes' ranges, in row-major order.
    std::copy(clo, clo + rank, index);
    for (;;) {
      int64_t row = 0;
      for (int d = 0; d < rank; ++d)
        if (d != axis_) row = row * sizes_[d] + index[d];
      query_row(row, i0, i1, vlo, vhi);
      int d = rank - 1;
      for (; d >= 0; --d) {
        if (d == axis_) continue;
        if (++index[d] <= chi[d]) break;
        index[d] = clo[d];
      }
      if (d < 0) break;
    }
  }
  if (outside) vlo = std::min(vlo, 0.0), vhi = std::max(vhi, 0.0);
  if (vlo > vhi) return {-kInf, kInf, true};  // only NaNs in range
  return {vlo, vhi, has_nan_};
}

size_t BufferSummary::bytes() const {
  return (min_.size() + max_.size() + pre_min_.size() + pre_max_.size() + suf_min_.size() +
          suf_max_.size()) *
         sizeof(double);
}

SummaryOracle::SummaryOracle(const IntervalEval& eval,
                             const std::map<std::string, BufferSummary, std::less<>>& summaries) {
  for (const Expr& load : eval.loads()) {
    auto it = summaries.find(load->name);
    TILEJIT_INTERNAL_CHECK(it != summaries.end(), "no summary of buffer '{}'", load->name);
    by_load_.push_back(&it->second);
  }
}

ValueRange SummaryOracle::range(int load, const int64_t* lo, const int64_t* hi) const {
  return by_load_[static_cast<size_t>(load)]->range(lo, hi);
}

}  // namespace tilejit
