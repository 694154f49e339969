// The GPU classifier's algorithm on the host: the range tables of kernels_templates/
// range_table.cuh against brute-force min / max; the row bisection of row_bisection.cuh against
// known class layouts (up to 2^31 - 1 tiles a row); and the kernel's two passes (slots of a few
// runs, offsets from the counts, rows that overflowed their slot classified again), with the
// CPU interval evaluator standing in for the generated one, against the elementwise reference
// and the CPU analysis, at every slot capacity, up to 1M tokens. Bisection must decide every
// tile that classifying tile by tile decides. Needs no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "compiler/BufferSummary.h"
#include "compiler/IntervalEval.h"
#include "dsl/Expr.h"
#include "dsl/Stdlib.h"
#include "kernels_templates/range_table.cuh"
#include "kernels_templates/row_bisection.cuh"
#include "runtime/MaskAnalysis.h"
#include "runtime/RunCompaction.h"
#include "tests/mask/MaskPrograms.h"

namespace tilejit::testing {
namespace {

using namespace tilejit::dsl;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(RangeTable, QueriesEqualBruteForce) {
  std::mt19937_64 rng(23);
  for (int iter = 0; iter < 200; ++iter) {
    long long rows = 1 + static_cast<long long>(rng() % 4);
    long long blocks = 1 + static_cast<long long>(rng() % (iter < 100 ? 40 : 3000));
    int levels = tjk::tj_range_levels(blocks);
    ASSERT_LE(1ll << (levels - 1), blocks);
    ASSERT_GT(1ll << levels, blocks);
    // Unwritten entries are poisoned so that reading one gives a wrong answer.
    std::vector<double> mn(static_cast<size_t>(levels * rows * blocks), -1e300);
    std::vector<double> mx(mn.size(), 1e300);
    std::vector<double> value(static_cast<size_t>(rows * blocks));
    for (size_t i = 0; i < value.size(); ++i) {
      value[i] = static_cast<double>(static_cast<int64_t>(rng() % 2001) - 1000);
      if (rng() % 50 == 0) value[i] = (rng() % 2 ? -1 : 1) * kInf;
      mn[i] = mx[i] = value[i];
    }
    for (int level = 1; level < levels; ++level)  // one GPU launch per level
      for (long long i = 0; i < rows * blocks; ++i)
        tjk::tj_range_table_entry(mn.data(), mx.data(), rows, blocks, level, i);
    for (int query = 0; query < 200; ++query) {
      long long row = static_cast<long long>(rng() % rows);
      long long b0 = static_cast<long long>(rng() % blocks);
      long long b1 = b0 + static_cast<long long>(rng() % (blocks - b0));
      double lo = kInf, hi = -kInf, want_lo = kInf, want_hi = -kInf;
      tjk::tj_range_query(mn.data(), mx.data(), rows, blocks, row, b0, b1, lo, hi);
      for (long long k = b0; k <= b1; ++k) {
        want_lo = std::min(want_lo, value[static_cast<size_t>(row * blocks + k)]);
        want_hi = std::max(want_hi, value[static_cast<size_t>(row * blocks + k)]);
      }
      ASSERT_EQ(lo, want_lo) << "row " << row << " blocks [" << b0 << ", " << b1 << "] of "
                             << blocks;
      ASSERT_EQ(hi, want_hi) << "row " << row << " blocks [" << b0 << ", " << b1 << "] of "
                             << blocks;
    }
  }
}

// A row given by its class changes: tiles [change[i], change[i + 1]) have class cls[i].
struct Layout {
  std::vector<int> change;
  std::vector<int> cls;
  int tiles;

  int class_of(int k) const {
    size_t i = std::upper_bound(change.begin(), change.end(), k) - change.begin() - 1;
    return cls[i];
  }
  // TRUE / FALSE when every tile of [k0, k1] is full / empty, else MAYBE.
  tjk::TjTri eval(int k0, int k1) const {
    size_t i = std::upper_bound(change.begin(), change.end(), k0) - change.begin() - 1;
    if (i + 1 < change.size() && change[i + 1] <= k1) return tjk::kTjMaybe;
    return cls[i] == tjk::kTjFull    ? tjk::kTjTrue
           : cls[i] == tjk::kTjEmpty ? tjk::kTjFalse
                                     : tjk::kTjMaybe;
  }
};

// A decided range of tiles, unencoded (TileRun's count holds 2^30 - 1 tiles at most).
struct Span {
  int64_t first, count;
  bool full;
  bool operator==(const Span&) const = default;
};

// Receives the bisection's ranges, merging adjacent ones of one kind.
struct SpanRecorder {
  std::vector<Span> spans;
  void add(int first, int n, bool full) {
    if (!spans.empty() && spans.back().full == full &&
        spans.back().first + spans.back().count == first)
      spans.back().count += n;
    else
      spans.push_back({first, n, full});
  }
};

TEST(RowBisection, RunsOfKnownLayoutsUpToTheLargestRow) {
  std::mt19937_64 rng(29);
  for (int iter = 0; iter < 400; ++iter) {
    Layout row;
    // The largest rows bisect 31 levels deep; rows of TileRun's largest run length are
    // checked through both passes.
    row.tiles = iter % 8 == 0   ? std::numeric_limits<int>::max() - static_cast<int>(rng() % 5)
                : iter % 8 == 4 ? (1 << 30) - 1 - static_cast<int>(rng() % 5)
                                : 1 + static_cast<int>(rng() % 3000);
    // Regions of random classes, partial ones short (bisection visits each of their tiles);
    // half of the time a one-tile region last (the deepest path of the bisection).
    int64_t end = row.tiles - (row.tiles > 1 && rng() % 2 ? 1 : 0);
    for (int64_t pos = 0; pos < row.tiles;) {
      int c = static_cast<int>(rng() % 3);
      int64_t rest = (pos < end ? end : row.tiles) - pos;
      uint64_t spread = std::max<uint64_t>(1, static_cast<uint64_t>(rest) / (1 + rng() % 8));
      int64_t len = c == tjk::kTjPartial ? 1 + static_cast<int64_t>(rng() % 5)
                                         : 1 + static_cast<int64_t>(rng() % spread);
      row.change.push_back(static_cast<int>(pos));
      row.cls.push_back(c);
      pos += std::min(len, rest);
    }
    // The expected runs, adjacent ones of one kind merged.
    std::vector<Span> want;
    for (size_t i = 0; i < row.change.size(); ++i) {
      int64_t stop = i + 1 < row.change.size() ? row.change[i + 1] : row.tiles;
      if (row.cls[i] == tjk::kTjEmpty) continue;
      bool full = row.cls[i] == tjk::kTjFull;
      if (!want.empty() && want.back().full == full &&
          want.back().first + want.back().count == row.change[i])
        want.back().count += stop - row.change[i];
      else
        want.push_back({row.change[i], stop - row.change[i], full});
    }
    auto eval = [&](int k0, int k1) { return row.eval(k0, k1); };
    SpanRecorder recorder;
    tjk::tj_bisect_row(row.tiles, eval, tjk::TjPartialLeaf{}, recorder);
    ASSERT_TRUE(recorder.spans == want)
        << "iteration " << iter << ": " << recorder.spans.size() << " runs, want " << want.size();
    if (row.tiles >= 1 << 30) continue;
    for (int capacity : {0, 1, 3, 16}) {
      std::vector<tjk::TjRun> slot(static_cast<size_t>(capacity), tjk::TjRun{-5, -5});
      int count = tjk::tj_row_count_pass(row.tiles, eval, slot.data(), capacity);
      ASSERT_EQ(count, static_cast<int>(want.size())) << "iteration " << iter;
      std::vector<tjk::TjRun> out(want.size() + 1, tjk::TjRun{-7, -7});
      tjk::tj_row_write_pass(row.tiles, eval, slot.data(), capacity, out.data(), count);
      for (size_t i = 0; i < want.size(); ++i) {
        TileRun w = TileRun::make(static_cast<int32_t>(want[i].first),
                                  static_cast<int32_t>(want[i].count), want[i].full);
        ASSERT_EQ(out[i].first, w.first) << "iteration " << iter << " run " << i;
        ASSERT_EQ(out[i].count_kind, w.count_kind) << "iteration " << iter << " run " << i;
      }
      EXPECT_EQ(out.back().first, -7) << "written past the row's runs";
    }
    // The leaf decides MAYBE tiles: an exact leaf makes the bisection exact.
    if (row.tiles <= 3000) {
      std::vector<int> got(static_cast<size_t>(row.tiles), -1);
      struct Marker {
        std::vector<int>& got;
        void add(int first, int n, bool full) {
          for (int k = first; k < first + n; ++k) got[k] = full ? tjk::kTjFull : tjk::kTjPartial;
        }
      } marker{got};
      auto leaf = [&](int k) { return row.class_of(k); };
      tjk::tj_bisect_row(row.tiles, eval, leaf, marker);
      for (int k = 0; k < row.tiles; ++k)
        ASSERT_EQ(got[k] < 0 ? tjk::kTjEmpty : got[k], row.class_of(k)) << "tile " << k;
    }
  }
}

// The GPU classifier run on the host: the kernel's two passes over the rows with `capacity`
// runs a slot and the host's compaction, the generated interval code replaced by the CPU's.
BlockMask emulate_gpu_classifier(const Expr& mask, const EvalContext& ctx,
                                 const BlockMaskShape& shape, int capacity) {
  BlockMaskShape ext = mask_extents(mask, shape);
  IntervalEval eval(mask, ctx.params);
  std::map<std::string, BufferSummary, std::less<>> summaries;
  for (const auto& [name, plan] : plan_buffer_summaries(eval, shape.block_q, shape.block_kv))
    summaries.emplace(name, BufferSummary(ctx.buffers.at(name), plan));
  SummaryOracle oracle(eval, summaries);
  int q_tiles = (ext.seq_q + ext.block_q - 1) / ext.block_q;
  int kv_tiles = (ext.seq_kv + ext.block_kv - 1) / ext.block_kv;
  size_t rows = static_cast<size_t>(ext.batch) * ext.heads * q_tiles;
  auto row_eval = [&](size_t r) {
    IndexBox row;
    size_t list = r / q_tiles;
    row.lo[0] = row.hi[0] = static_cast<int64_t>(list) / ext.heads;
    row.lo[1] = row.hi[1] = static_cast<int64_t>(list) % ext.heads;
    row.lo[2] = static_cast<int64_t>(r % q_tiles) * ext.block_q;
    row.hi[2] = std::min<int64_t>(row.lo[2] + ext.block_q, ext.seq_q) - 1;
    return [&, row](int k0, int k1) {
      IndexBox box = row;
      box.lo[3] = int64_t{k0} * ext.block_kv;
      box.hi[3] = std::min<int64_t>((k1 + int64_t{1}) * ext.block_kv, ext.seq_kv) - 1;
      return static_cast<tjk::TjTri>(eval.eval(box, &oracle));
    };
  };
  const tjk::TjRun poison{-3, -3};
  std::vector<tjk::TjRun> slots(rows * capacity, poison);
  std::vector<int32_t> counts(rows, -1);
  for (size_t r = 0; r < rows; ++r)
    counts[r] =
        tjk::tj_row_count_pass(kv_tiles, row_eval(r), slots.data() + r * capacity, capacity);
  std::vector<int32_t> offsets = run_offsets(counts, "emulated");
  std::vector<tjk::TjRun> out(static_cast<size_t>(offsets.back()), poison);
  for (size_t r = 0; r < rows; ++r)
    tjk::tj_row_write_pass(kv_tiles, row_eval(r), slots.data() + r * capacity, capacity,
                           out.data() + offsets[r], offsets[r + 1] - offsets[r]);
  std::vector<TileRun> runs;
  for (const tjk::TjRun& run : out) runs.push_back(TileRun{run.first, run.count_kind});
  return BlockMask::from_rows(ext, split_rows(offsets, runs));
}

// Every verdict of `got` sound against the reference; returns the tiles it leaves partial
// where the reference decides.
int64_t undecided(const BlockMask& got, const BlockMask& ref, const std::string& what) {
  int64_t n = 0;
  for (int b = 0; b < ref.shape().batch; ++b)
    for (int h = 0; h < ref.shape().heads; ++h)
      for (int qt = 0; qt < ref.q_tiles(); ++qt)
        for (int kt = 0; kt < ref.kv_tiles(); ++kt) {
          TileClass g = got.tile_class(b, h, qt, kt), w = ref.tile_class(b, h, qt, kt);
          if (g != TileClass::Partial && g != w) {
            ADD_FAILURE() << what << ": unsound tile (" << b << "," << h << "," << qt << "," << kt
                          << ")";
            return n;
          }
          n += g != w;
        }
  return n;
}

void expect_same_runs(const BlockMask& got, const BlockMask& want, const std::string& what) {
  ASSERT_EQ(got.offsets(), want.offsets()) << what;
  ASSERT_EQ(got.runs().size(), want.runs().size()) << what;
  for (size_t i = 0; i < got.runs().size(); ++i) {
    ASSERT_EQ(got.runs()[i].first, want.runs()[i].first) << what << " run " << i;
    ASSERT_EQ(got.runs()[i].count_kind, want.runs()[i].count_kind) << what << " run " << i;
  }
  EXPECT_EQ(got.t_offsets(), want.t_offsets()) << what;
}

struct DocBuffer {
  std::vector<int32_t> ids;
  EvalContext ctx;
};

// Sorted document ids in [0, docs) for `batch` rows of `seq` tokens, bound as `doc`.
DocBuffer sorted_documents(std::mt19937_64& rng, int batch, int seq, int docs) {
  DocBuffer d;
  d.ids.resize(static_cast<size_t>(batch) * seq);
  for (int b = 0; b < batch; ++b) {
    auto first = d.ids.begin() + static_cast<ptrdiff_t>(b) * seq;
    for (auto it = first; it != first + seq; ++it) *it = static_cast<int32_t>(rng() % docs);
    std::sort(first, first + seq);
  }
  d.ctx.buffers["doc"] = BufferView{d.ids.data(), ElemType::I32, {batch, seq}, {}};
  return d;
}

TEST(GpuClassifierOnHost, StandardMasksAreExactAtEveryCapacity) {
  std::mt19937_64 rng(31);
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  std::vector<std::pair<std::string, Expr>> masks = {
      {"causal", stdlib::causal()},
      {"window", stdlib::sliding_window(lit(300))},
      {"chunked", stdlib::chunked(lit(200)) && stdlib::causal()},
      {"image", stdlib::image_block_or_causal(lit(100), lit(700))},
      {"stripes", (kv / 64) % 2 == 0 && q >= kv},  // ~16 runs a row: past every slot
      {"document", stdlib::document(doc)},
      {"document_causal", stdlib::document(doc) && stdlib::causal()}};
  for (BlockMaskShape s : {BlockMaskShape{.batch = 2, .heads = 3, .seq_q = 2000, .seq_kv = 2000},
                           BlockMaskShape{.batch = 2, .heads = 1, .seq_q = 777, .seq_kv = 1500}}) {
    DocBuffer docs = sorted_documents(rng, s.batch, std::max(s.seq_q, s.seq_kv), 9);
    for (const auto& [name, mask] : masks) {
      BlockMask ref = reference_block_mask(mask, docs.ctx, s);
      BlockMask cpu = analyse_block_mask(mask, docs.ctx, s, {.threads = 1});
      for (int capacity : {0, 1, 2, 8}) {
        std::string what = name + " capacity " + std::to_string(capacity);
        BlockMask got = emulate_gpu_classifier(mask, docs.ctx, s, capacity);
        expect_same_runs(got, ref, what);
        expect_same_runs(got, cpu, what);
      }
    }
  }
}

// Random mask-shaped programs: sound; identical to the CPU analysis (same bisection and
// evaluator); and every tile decided when tiles are classified one by one is decided.
TEST(GpuClassifierOnHost, RandomProgramsAreSoundAndAtLeastAsTightAsTileByTile) {
  std::mt19937_64 rng(37);
  int64_t tiles = 0, left = 0;
  for (int i = 0; i < 150; ++i) {
    AttentionProgram p = random_mask_program(rng, 1 + static_cast<int>(rng() % 3));
    MaskBindings mb = random_mask_bindings(rng, p, 2, 2, 130);
    BlockMaskShape s{.batch = 2,
                     .heads = 2,
                     .seq_q = 30 + static_cast<int>(rng() % 100),
                     .seq_kv = 30 + static_cast<int>(rng() % 100),
                     .block_q = 8,
                     .block_kv = 4};
    std::string what = "random #" + std::to_string(i);
    BlockMask got = emulate_gpu_classifier(p.mask, mb.ctx, s, static_cast<int>(rng() % 4));
    BlockMask ref = reference_block_mask(p.mask, mb.ctx, s);
    left += undecided(got, ref, what);
    expect_same_runs(got, analyse_block_mask(p.mask, mb.ctx, s, {.threads = 1}), what);

    // Tile by tile with the same evaluator (what the previous GPU classifier did).
    BlockMaskShape ext = mask_extents(p.mask, s);
    IntervalEval eval(p.mask, mb.ctx.params);
    std::map<std::string, BufferSummary, std::less<>> summaries;
    for (const auto& [name, plan] : plan_buffer_summaries(eval, s.block_q, s.block_kv))
      summaries.emplace(name, BufferSummary(mb.ctx.buffers.at(name), plan));
    SummaryOracle oracle(eval, summaries);
    BlockMask per_tile = BlockMask::from_classifier(ext, [&](int b, int h, int qt, int kt) {
      IndexBox box;
      box.lo[0] = box.hi[0] = b;
      box.lo[1] = box.hi[1] = h;
      box.lo[2] = int64_t{qt} * s.block_q;
      box.hi[2] = std::min<int64_t>(box.lo[2] + s.block_q, s.seq_q) - 1;
      box.lo[3] = int64_t{kt} * s.block_kv;
      box.hi[3] = std::min<int64_t>(box.lo[3] + s.block_kv, s.seq_kv) - 1;
      Tri t = eval.eval(box, &oracle);
      return t == Tri::True    ? TileClass::Full
             : t == Tri::False ? TileClass::Empty
                               : TileClass::Partial;
    });
    for (int b = 0; b < ext.batch; ++b)
      for (int h = 0; h < ext.heads; ++h)
        for (int qt = 0; qt < got.q_tiles(); ++qt)
          for (int kt = 0; kt < got.kv_tiles(); ++kt) {
            TileClass t = per_tile.tile_class(b, h, qt, kt);
            if (t == TileClass::Partial) continue;
            ASSERT_EQ(got.tile_class(b, h, qt, kt), t)
                << what << ": tile (" << b << "," << h << "," << qt << "," << kt
                << ") decided tile by tile, not by bisection";
          }
    tiles += static_cast<int64_t>(ref.lists()) * ref.q_tiles() * ref.kv_tiles();
  }
  std::printf("emulated GPU classifier: %lld tiles, %.1f%% verdicts exact\n",
              static_cast<long long>(tiles), 100.0 * (tiles - left) / std::max<int64_t>(tiles, 1));
}

TEST(GpuClassifierOnHost, MillionTokensGiveTheCpuRuns) {
  const int S = 1 << 20;
  std::mt19937_64 rng(41);
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  DocBuffer docs = sorted_documents(rng, 1, S, 32);
  BlockMaskShape s{.batch = 1, .heads = 16, .seq_q = S, .seq_kv = S};
  for (const auto& [name, mask] : std::vector<std::pair<std::string, Expr>>{
           {"causal", stdlib::causal()},
           {"document_causal", stdlib::document(doc) && stdlib::causal()}}) {
    BlockMask cpu = analyse_block_mask(mask, docs.ctx, s);
    BlockMask got = emulate_gpu_classifier(mask, docs.ctx, s, 8);
    expect_same_runs(got, cpu, name + " 1M");
    std::printf("%s 1M: %zu runs\n", name.c_str(), got.runs().size());
    EXPECT_LE(got.runs().size(), 4u * got.q_tiles()) << name;
  }
}

}  // namespace
}  // namespace tilejit::testing
