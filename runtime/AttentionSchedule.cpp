#include "runtime/AttentionSchedule.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "compiler/Error.h"

namespace tilejit::attention_schedule {
namespace {

// The integer in environment variable `name`, within [lo, hi]; `unset` when it is unset or empty.
int64_t env_integer(const char* name, int64_t lo, int64_t hi, int64_t unset) {
  const char* env = std::getenv(name);
  if (!env || !*env) return unset;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  TILEJIT_USER_CHECK(*end == 0 && v >= lo && v <= hi,
                     "{} must be an integer from {} to {}, got '{}'", name, lo, hi, env);
  return v;
}

}  // namespace

// Items of one head that run together read the same K and V (forward) or Q, dO and dQ rows
// (backward) close together in time, so all but the first read them from L2. With `heads` heads
// and `ctas` CTAs running at once, a band of 1 puts ctas / heads items of each head side by side:
// enough where the sequences are long and the heads few (S 8k, B 2: 4 per head); at S 2k, B 8
// every running CTA had a head of its own and read everything from memory (bench/NOTES.md,
// thirtieth session). The band is chosen so that kItemsPerHead of each head run together.
int band(int64_t heads, int64_t tiles, int64_t ctas) {
  static const int64_t chosen = env_integer("TILEJIT_ATTENTION_BAND", 1, 1024, 0);
  constexpr int64_t kItemsPerHead = 4;
  const int64_t band =
      chosen ? chosen : (kItemsPerHead * heads + ctas - 1) / std::max<int64_t>(ctas, 1);
  return static_cast<int>(std::clamp<int64_t>(band, 1, std::max<int64_t>(tiles, 1)));
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
