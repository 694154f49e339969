// Dense boolean masks, as passed to scaled-dot-product attention today, rewritten as mask
// programs. For each mask (causal, sliding window, packed documents, prefix-LM) and sequence
// length, it compares the two ways to a block mask:
//
//   before: a dense [S, S] byte tensor filled elementwise, then BlockMask::from_dense over it
//   after:  the mask program and its captured values, classified by mask analysis
//           (runtime/MaskAnalysis.h), no element evaluated
//
// and prints the memory (dense tensor bytes vs block-mask bytes) and time of each. Wherever the
// dense tensor is built, the program must agree with it: its block mask must classify every tile
// exactly as the one from the dense tensor (which evaluated every element), and its mask, run
// elementwise, must equal the tensor. The exit code is non-zero on any difference, and the first
// differing tiles or elements are printed.
//
//   mask_programs [--sizes 4096,16384,65536,1048576] [--dense-max 16384]
//
// Dense tensors are built only up to --dense-max tokens (S * S bytes each: 4 GiB at 64k); past
// that only their size is shown.
#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "dsl/Builders.h"
#include "dsl/Stdlib.h"
#include "runtime/BlockMask.h"
#include "runtime/MaskAnalysis.h"
#include "runtime/cpu/RowHooks.h"

using namespace tilejit;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

// One mask in both forms at one sequence length: how a framework fills the dense tensor, and
// the program with the values it captures.
struct MaskCase {
  std::string name = {};
  std::function<bool(int64_t q, int64_t kv)> keep = {};  // a dense element, written by hand
  AttentionProgram program = {};
  Bindings bind = {};
  std::vector<int32_t> storage = {};  // captured buffer contents (bind views them)
};

std::vector<MaskCase> mask_cases(int seq, std::mt19937_64& rng) {
  std::vector<MaskCase> cases;
  cases.push_back({"causal",
                   [](int64_t q, int64_t kv) { return q >= kv; },
                   AttentionBuilder("causal").mask(stdlib::causal()).build(),
                   {},
                   {}});

  const int32_t window = 1024;
  dsl::Param window_p("window", Type::I32);
  cases.push_back({"sliding window 1024",
                   [=](int64_t q, int64_t kv) { return q >= kv && q - kv < window; },
                   AttentionBuilder("sliding_window")
                       .param(window_p)
                       .mask(stdlib::sliding_window(window_p))
                       .build(),
                   Bindings{{"window", window}},
                   {}});

  // Packed documents of 100 .. 4000 tokens. (A vector's elements stay put when it is moved, so
  // the views taken here stay valid in `cases`.)
  MaskCase docs{.name = "documents + causal", .storage = std::vector<int32_t>(seq)};
  for (int i = 0, id = -1, left = 0; i < seq; ++i) {
    if (left-- == 0) ++id, left = 100 + int(rng() % 3900);
    docs.storage[i] = id;
  }
  docs.keep = [ids = docs.storage.data()](int64_t q, int64_t kv) {
    return ids[q] == ids[kv] && q >= kv;
  };
  dsl::Buffer doc("doc", ElemType::I32, {"B", "S"});
  docs.program = AttentionBuilder("document_causal")
                     .buffer(doc)
                     .mask(stdlib::document(doc) && stdlib::causal())
                     .build();
  docs.bind = Bindings{{"doc", TensorView::contiguous(docs.storage.data(), DType::I32, {1, seq},
                                                      TensorView::Where::Host, "doc")}};
  cases.push_back(std::move(docs));

  // Prefix-LM: the first quarter (plus an odd remainder) is bidirectional.
  const int32_t prefix_len = seq / 4 + 37;
  MaskCase prefix{.name = "prefix-LM", .storage = {prefix_len}};
  prefix.keep = [=](int64_t q, int64_t kv) { return kv < prefix_len || q >= kv; };
  dsl::Buffer prefix_b("prefix", ElemType::I32, {"B"});
  prefix.program = AttentionBuilder("prefix_lm")
                       .buffer(prefix_b)
                       .mask(stdlib::prefix_lm(prefix_b(dsl::b)))
                       .build();
  prefix.bind = Bindings{{"prefix", TensorView::contiguous(prefix.storage.data(), DType::I32, {1},
                                                           TensorView::Where::Host, "prefix")}};
  cases.push_back(std::move(prefix));
  return cases;
}

const char* class_name(TileClass c) {
  return c == TileClass::Full ? "full" : c == TileClass::Partial ? "partial" : "empty";
}

// Tiles where the two block masks differ (both exact here: the dense one evaluated every
// element, the analysis classifies these masks exactly); the first few are printed.
int64_t count_differences(const BlockMask& from_program, const BlockMask& from_dense) {
  int64_t differ = 0;
  for (int qt = 0; qt < from_dense.q_tiles(); ++qt) {
    for (int kt = 0; kt < from_dense.kv_tiles(); ++kt) {
      TileClass a = from_program.tile_class(0, 0, qt, kt), b = from_dense.tile_class(0, 0, qt, kt);
      if (a == b) continue;
      if (++differ <= 5)
        std::printf("    tile (%d, %d): program says %s, dense tensor says %s\n", qt, kt,
                    class_name(a), class_name(b));
    }
  }
  return differ;
}

// Elements where the program's mask, evaluated by its compiled row hook (runtime/cpu/RowHooks.h),
// differs from the dense tensor: a tile-level match can hide an off-by-one inside partial tiles.
int64_t count_element_differences(const MaskCase& c, const std::vector<uint8_t>& dense, int seq) {
  auto hooks = make_row_hooks(lower(c.program), c.bind);
  std::vector<uint8_t> row(seq);
  int64_t differ = 0;
  for (int q = 0; q < seq; ++q) {
    hooks->mask_row(0, 0, q, 0, seq, row.data());
    for (int kv = 0; kv < seq; ++kv) {
      if (bool(row[kv]) == bool(dense[size_t(q) * seq + kv])) continue;
      if (++differ <= 5)
        std::printf("    element (%d, %d): program says %d, dense tensor says %d\n", q, kv,
                    row[kv] != 0, dense[size_t(q) * seq + kv] != 0);
    }
  }
  return differ;
}

// The dense path: fill the [S, S] tensor, build its block mask, compare with the program's.
struct DenseSide {
  std::string time;
  int64_t tile_differences = 0, element_differences = 0;
};

DenseSide dense_side(const MaskCase& c, const BlockMaskShape& shape,
                     const BlockMask& from_program) {
  const int seq = shape.seq_q;
  auto t0 = Clock::now();
  std::vector<uint8_t> dense(size_t(seq) * seq);
  for (int64_t q = 0; q < seq; ++q)
    for (int64_t kv = 0; kv < seq; ++kv) dense[q * seq + kv] = c.keep(q, kv);
  const double fill_ms = ms_since(t0);
  t0 = Clock::now();
  const int64_t strides[4] = {0, 0, seq, 1};
  BlockMask from_dense = BlockMask::from_dense(shape, dense.data(), strides);
  DenseSide d{.time = fmt::format("{:.0f} + {:.0f} ms", fill_ms, ms_since(t0))};
  d.tile_differences = count_differences(from_program, from_dense);
  d.element_differences = count_element_differences(c, dense, seq);
  return d;
}

struct Options {
  std::vector<int> sizes = {4096, 16384, 65536, 1048576};
  int dense_max = 16384;
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    TILEJIT_USER_CHECK(i + 1 < argc && (arg == "--sizes" || arg == "--dense-max"),
                       "usage: mask_programs [--sizes N,N,...] [--dense-max N] (got '{}')", arg);
    std::string value = argv[++i];
    if (arg == "--dense-max") {
      o.dense_max = std::atoi(value.c_str());
      continue;
    }
    o.sizes.clear();
    std::istringstream in(value);
    for (std::string n; std::getline(in, n, ',');) {
      o.sizes.push_back(std::atoi(n.c_str()));
      TILEJIT_USER_CHECK(o.sizes.back() > 0, "--sizes takes positive lengths, got '{}'", n);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options options = parse_options(argc, argv);
    std::mt19937_64 rng(std::random_device{}());
    int64_t failures = 0;
    std::printf("%-20s %8s | %10s %17s | %10s %12s |\n", "", "", "dense mask", "fill + from_dense",
                "block mask", "analysis");
    std::printf("%-20s %8s | %10s %17s | %10s %12s | %s\n", "mask", "S", "bytes", "time", "bytes",
                "time", "tiles full/partial/empty");
    for (int seq : options.sizes) {
      for (MaskCase& c : mask_cases(seq, rng)) {
        const BlockMaskShape shape{.seq_q = seq, .seq_kv = seq};
        auto t0 = Clock::now();
        BlockMask from_program = analyse_block_mask(lower(c.program), c.bind, shape);
        const double analysis_ms = ms_since(t0);
        const BlockMask::Counts n = from_program.counts();

        const double dense_bytes = double(seq) * seq;
        std::string dense_time = "not built", verdict;
        if (seq <= options.dense_max) {
          DenseSide d = dense_side(c, shape, from_program);
          dense_time = d.time;
          failures += d.tile_differences + d.element_differences;
          verdict = d.tile_differences + d.element_differences == 0
                        ? "  same as dense"
                        : fmt::format("  DIFFERS from dense: {} tiles, {} elements",
                                      d.tile_differences, d.element_differences);
        }
        std::printf("%-20s %8d | %10s %17s | %10s %9.2f ms | %lld/%lld/%lld%s\n", c.name.c_str(),
                    seq, format_bytes(dense_bytes).c_str(), dense_time.c_str(),
                    format_bytes(double(from_program.bytes())).c_str(), analysis_ms,
                    (long long)n.full, (long long)n.partial, (long long)n.empty, verdict.c_str());
      }
    }
    if (failures) {
      std::printf("FAILED: %lld tiles or elements differ from the dense tensors\n",
                  (long long)failures);
      return 1;
    }
    std::printf("every program matches its dense tensor, element for element and tile for tile\n");
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "mask_programs: %s\n", e.what());
    return 1;
  }
}
