#include "runtime/BlockMask.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

namespace tilejit {

namespace {

int tiles_of(int seq, int block) { return seq <= 0 ? 0 : (seq + block - 1) / block; }

}  // namespace

void append_tile(std::vector<TileRun>& runs, int32_t list_begin, int32_t t, TileClass c) {
  if (c == TileClass::Empty) return;
  bool full = c == TileClass::Full;
  if (static_cast<int32_t>(runs.size()) > list_begin) {
    TileRun& last = runs.back();
    if (last.full() == full && last.first + last.count() == t) {
      last = TileRun::make(last.first, last.count() + 1, full);
      return;
    }
  }
  runs.push_back(TileRun::make(t, 1, full));
}

void BlockMask::init_shape(const BlockMaskShape& shape) {
  if (shape.batch < 1 || shape.heads < 1 || shape.seq_q < 0 || shape.seq_kv < 0 ||
      shape.block_q < 1 || shape.block_kv < 1)
    throw std::invalid_argument(
        "BlockMask: batch, heads and block sizes must be >= 1, "
        "sequence lengths >= 0");
  shape_ = shape;
  q_tiles_ = tiles_of(shape.seq_q, shape.block_q);
  kv_tiles_ = tiles_of(shape.seq_kv, shape.block_kv);
}

BlockMask BlockMask::from_classifier(const BlockMaskShape& shape, const Classifier& classify) {
  BlockMask m;
  m.init_shape(shape);
  m.offsets_.reserve(static_cast<size_t>(m.lists()) * m.q_tiles_ + 1);
  m.offsets_.push_back(0);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (int qt = 0; qt < m.q_tiles_; ++qt) {
        int32_t begin = static_cast<int32_t>(m.runs_.size());
        for (int kt = 0; kt < m.kv_tiles_; ++kt)
          append_tile(m.runs_, begin, kt, classify(b, h, qt, kt));
        m.offsets_.push_back(static_cast<int32_t>(m.runs_.size()));
      }
  m.build_transposed();
  return m;
}

BlockMask BlockMask::from_tile_classes(const BlockMaskShape& shape,
                                       const std::vector<TileClass>& classes) {
  int qt_n = tiles_of(shape.seq_q, shape.block_q), kt_n = tiles_of(shape.seq_kv, shape.block_kv);
  size_t expected = static_cast<size_t>(shape.batch) * shape.heads * qt_n * kt_n;
  if (classes.size() != expected)
    throw std::invalid_argument("BlockMask::from_tile_classes: expected " +
                                std::to_string(expected) + " tile classes, got " +
                                std::to_string(classes.size()));
  return from_classifier(shape, [&](int b, int h, int qt, int kt) {
    return classes[((static_cast<size_t>(b) * shape.heads + h) * qt_n + qt) * kt_n + kt];
  });
}

BlockMask BlockMask::from_dense(const BlockMaskShape& shape, const uint8_t* mask,
                                const int64_t strides[4]) {
  return from_classifier(shape, [&](int b, int h, int qt, int kt) {
    int q0 = qt * shape.block_q, q1 = std::min(shape.seq_q, q0 + shape.block_q);
    int k0 = kt * shape.block_kv, k1 = std::min(shape.seq_kv, k0 + shape.block_kv);
    bool any = false, all = true;
    const uint8_t* base = mask + b * strides[0] + h * strides[1];
    for (int q = q0; q < q1; ++q)
      for (int kv = k0; kv < k1; ++kv) {
        bool keep = base[q * strides[2] + kv * strides[3]] != 0;
        any |= keep;
        all &= keep;
      }
    return !any ? TileClass::Empty : all ? TileClass::Full : TileClass::Partial;
  });
}

BlockMask BlockMask::from_rows(const BlockMaskShape& shape,
                               const std::vector<std::vector<TileRun>>& rows) {
  BlockMask m;
  m.init_shape(shape);
  size_t expected = static_cast<size_t>(m.lists()) * m.q_tiles_;
  if (rows.size() != expected)
    throw std::invalid_argument("BlockMask::from_rows: expected " + std::to_string(expected) +
                                " run lists, got " + std::to_string(rows.size()));
  m.offsets_.reserve(expected + 1);
  m.offsets_.push_back(0);
  for (const std::vector<TileRun>& row : rows) {
    int32_t begin = static_cast<int32_t>(m.runs_.size());
    int32_t next_free = 0;
    for (const TileRun& run : row) {
      if (run.count() <= 0 || run.first < next_free || run.first + run.count() > m.kv_tiles_)
        throw std::invalid_argument("BlockMask::from_rows: runs must be non-empty, sorted, "
                                    "non-overlapping and inside the kv tiles");
      next_free = run.first + run.count();
      TileRun* last = static_cast<int32_t>(m.runs_.size()) > begin ? &m.runs_.back() : nullptr;
      if (last && last->full() == run.full() && last->first + last->count() == run.first)
        *last = TileRun::make(last->first, last->count() + run.count(), run.full());
      else
        m.runs_.push_back(run);
    }
    m.offsets_.push_back(static_cast<int32_t>(m.runs_.size()));
  }
  m.build_transposed();
  return m;
}

namespace {

// One row's classes as a walk over kv tiles: the class at kt and the next kt where it may
// change, from the row's sorted runs.
struct RowCursor {
  const TileRun* run;
  const TileRun* end;

  // Class of [kt, stop) and stop (the first kt after kt where the class can change).
  TileClass at(int kt, int kv_tiles, int* stop) {
    while (run != end && run->first + run->count() <= kt) ++run;
    if (run == end) {
      *stop = kv_tiles;
      return TileClass::Empty;
    }
    if (kt < run->first) {
      *stop = run->first;
      return TileClass::Empty;
    }
    *stop = run->first + run->count();
    return run->full() ? TileClass::Full : TileClass::Partial;
  }
};

}  // namespace

// The transposed lists (per kv tile, runs of q tiles), in time proportional to the runs: a
// column's class changes between q tiles qt-1 and qt only where the two rows' run lists
// differ, so comparing consecutive rows yields every boundary of every column's runs, in
// increasing qt order.
void BlockMask::build_transposed() {
  struct Boundary {
    int32_t qt;
    TileClass c;
  };
  std::vector<std::vector<Boundary>> per_kt(kv_tiles_);
  t_offsets_.assign(1, 0);
  t_runs_.clear();
  const TileRun* none = nullptr;
  for (int l = 0; l < lists(); ++l) {
    for (auto& v : per_kt) v.clear();
    for (int qt = 0; qt <= q_tiles_; ++qt) {
      size_t prev = static_cast<size_t>(l) * q_tiles_ + qt - 1, cur = prev + 1;
      const TileRun* base = runs_.data();
      RowCursor a = qt > 0 ? RowCursor{base + offsets_[prev], base + offsets_[prev + 1]}
                           : RowCursor{none, none};
      RowCursor b = qt < q_tiles_ ? RowCursor{base + offsets_[cur], base + offsets_[cur + 1]}
                                  : RowCursor{none, none};
      for (int kt = 0; kt < kv_tiles_;) {
        int stop_a, stop_b;
        TileClass ca = a.at(kt, kv_tiles_, &stop_a), cb = b.at(kt, kv_tiles_, &stop_b);
        int stop = std::min(stop_a, stop_b);
        if (ca != cb)
          for (int k = kt; k < stop; ++k) per_kt[k].push_back({qt, cb});
        kt = stop;
      }
    }
    for (int kt = 0; kt < kv_tiles_; ++kt) {
      const std::vector<Boundary>& bs = per_kt[kt];
      for (size_t i = 0; i + 1 < bs.size(); ++i)
        if (bs[i].c != TileClass::Empty)
          t_runs_.push_back(
              TileRun::make(bs[i].qt, bs[i + 1].qt - bs[i].qt, bs[i].c == TileClass::Full));
      t_offsets_.push_back(static_cast<int32_t>(t_runs_.size()));
    }
  }
}

TileClass BlockMask::tile_class(int b, int h, int qt, int kt) const {
  size_t i = (static_cast<size_t>(b) * shape_.heads + h) * q_tiles_ + qt;
  for (int32_t r = offsets_[i]; r < offsets_[i + 1]; ++r) {
    const TileRun& run = runs_[r];
    if (kt >= run.first && kt < run.first + run.count())
      return run.full() ? TileClass::Full : TileClass::Partial;
  }
  return TileClass::Empty;
}

BlockMask::Counts BlockMask::counts() const {
  Counts c;
  for (const TileRun& run : runs_) (run.full() ? c.full : c.partial) += run.count();
  c.empty = static_cast<int64_t>(lists()) * q_tiles_ * kv_tiles_ - c.full - c.partial;
  return c;
}

bool BlockMask::tiles_rise_with_q() const {
  std::vector<int64_t> least(q_tiles_, std::numeric_limits<int64_t>::max()), most(q_tiles_, 0);
  for (int list = 0; list < lists(); ++list)
    for (int t = 0; t < q_tiles_; ++t) {
      const size_t i = size_t(list) * q_tiles_ + t;
      int64_t n = 0;
      for (int32_t r = offsets_[i]; r < offsets_[i + 1]; ++r) n += runs_[r].count();
      least[t] = std::min(least[t], n);
      most[t] = std::max(most[t], n);
    }
  for (int t = 1; t < q_tiles_; ++t)
    if (least[t] < most[t - 1]) return false;
  return true;
}

size_t BlockMask::bytes() const {
  return (offsets_.size() + t_offsets_.size()) * sizeof(int32_t) +
         (runs_.size() + t_runs_.size()) * sizeof(TileRun);
}

}  // namespace tilejit
