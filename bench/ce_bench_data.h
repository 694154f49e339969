// Host-generated problems for the fused linear cross-entropy benchmark (linear_ce_gpu_bench):
// the data kinds of shared PERF.md "Loss targets", as the peers' generator draws them.
//   zipf    the shape of a trained head: a Zipf(1.1) unigram log-prior over a shuffled live
//           vocabulary in the weights' last column (the hidden states' last column is 1),
//           targets drawn from that prior, context noise of logit std 2, target logit lifted by 12
//   flat    logits ~ N(0, 1), uniform targets, no lift (all logits about equal)
//   peaked  logit std 3, uniform targets lifted by 20 (a few large logits scattered uniformly)
// Weights ~ N(0, 1) (the scale the peers give C only rescales the logits, so the hidden states
// carry it); hidden states are noise of the kind's logit std plus lift * C[t] / |C[t]|^2; a
// fraction of the rows then gets ignore_index (their lift stays, as in the peers' data).
// Deterministic for a given spec: bulk values come from a counter-based generator, so the
// result does not depend on the number of threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace tilejit::bench {

enum class CeDataKind { Zipf, Flat, Peaked };

// "zipf", "flat", "peaked" (PERF.md's "peaked-random" is accepted too); nullopt otherwise.
std::optional<CeDataKind> parse_ce_data_kind(std::string_view name);
std::string_view ce_data_kind_name(CeDataKind kind);  // as the peers' JSON spells it

constexpr int32_t kCeIgnoreIndex = -100;

struct CeDataSpec {
  int64_t rows = 0, dim = 0;                          // N, D
  std::vector<std::pair<int64_t, int64_t>> segments;  // (first global id, size), sorted
  CeDataKind kind = CeDataKind::Zipf;
  double ignored = 0.1;  // fraction of rows given ignore_index
  bool teacher = false;  // also draw teacher hidden states (same targets, other noise)
  uint64_t seed = 1;
};

struct CeHostData {
  std::vector<std::vector<uint16_t>> weights;  // bf16 [V_s, D] per segment
  std::vector<uint16_t> hidden;                // bf16 [N, D]
  std::vector<uint16_t> teacher_hidden;        // bf16 [N, D] when spec.teacher, else empty
  std::vector<int32_t> targets;                // [N] global ids, or kCeIgnoreIndex
  int64_t kept_rows = 0;                       // rows whose target is not ignored
};

CeHostData make_ce_data(const CeDataSpec& spec);

}  // namespace tilejit::bench
