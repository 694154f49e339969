#include "runtime/AttentionSchedule.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "compiler/Error.h"
#include "runtime/Environment.h"

namespace tilejit::attention_schedule {
namespace {

// TILEJIT_ATTENTION_BAND, for measuring (0 when unset).
int64_t band_override() {
  static const int64_t chosen = env_integer("TILEJIT_ATTENTION_BAND", 1, 1024, 0);
  return chosen;
}

int clamp_band(int64_t band, int64_t tiles) {
  return static_cast<int>(std::clamp<int64_t>(band, 1, std::max<int64_t>(tiles, 1)));
}

}  // namespace

// Items of one head that run together read the same K and V (forward) or Q, dO and dQ rows
// (backward) close together in time, so all but the first read them from L2. With `heads` heads
// and `ctas` CTAs running at once, a band of 1 puts ctas / heads items of each head side by side:
// enough where the sequences are long and the heads few (S 8k, B 2: 4 per head); at S 2k, B 8
// every running CTA had a head of its own and read everything from memory (bench/NOTES.md,
// thirtieth session). The forward's band is chosen so that kItemsPerHead of each head run
// together; longer bands lost up to 8% on documents at 8k (thirty-fourth session, run 5).
int forward_band(int64_t heads, int64_t tiles, int64_t ctas) {
  constexpr int64_t kItemsPerHead = 4;
  const int64_t chosen = band_override();
  return clamp_band(
      chosen ? chosen : (kItemsPerHead * heads + ctas - 1) / std::max<int64_t>(ctas, 1), tiles);
}

// The backward gains from longer bands than the forward's rule gives: with 16 key blocks (2048
// keys) of a head numbered together, against that rule's 4 at S 2k and 1 at 8k, the backward
// ran 6% faster on causal masks at 2k, 13% on sliding windows and documents there and 4-10% on
// causal masks at 8k; from 8 to 32 the figures were level, as were bands of 1 to 8 at 32k
// (bench/NOTES.md, thirty-fourth session, runs 5-6).
int backward_band(int64_t key_blocks) {
  constexpr int64_t kKeyBlocks = 16;
  const int64_t chosen = band_override();
  return clamp_band(chosen ? chosen : kKeyBlocks, key_blocks);
}

bool forward_uses_counter(bool fixed_shares) {
  static const std::string chosen = [] {
    const char* env = std::getenv("TILEJIT_ATTENTION_SCHEDULE");
    return std::string(env ? env : "");
  }();
  TILEJIT_USER_CHECK(chosen.empty() || chosen == "counter" || chosen == "fixed",
                     "TILEJIT_ATTENTION_SCHEDULE must be 'counter' or 'fixed', got '{}'", chosen);
  if (chosen.empty()) return !fixed_shares;
  return chosen == "counter";
}

int64_t backward_grid(int64_t items, int64_t sms) {
  const int64_t cap = env_integer("TILEJIT_ATTENTION_BWD_CTAS", 0, int64_t{1} << 20, 0);
  const int64_t ctas = std::min(items, cap > 0 ? std::min(cap, sms) : sms);
  TILEJIT_USER_CHECK(items + ctas <= std::numeric_limits<int>::max(),
                     "attention backward: {} work items (B * Hkv * key blocks) are past the "
                     "Hopper kernel's int counter",
                     items);
  return ctas;
}

}  // namespace tilejit::attention_schedule
