#include "bench/ce_bench_data.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

namespace tilejit::bench {

namespace {

struct KindShape {
  double zipf;   // exponent of the unigram prior (0: none, uniform targets)
  double noise;  // logit std of the context noise
  double lift;   // added to the target logit
};

KindShape shape_of(CeDataKind kind) {
  switch (kind) {
    case CeDataKind::Zipf: return {1.1, 2.0, 12.0};
    case CeDataKind::Flat: return {0.0, 1.0, 0.0};
    case CeDataKind::Peaked: return {0.0, 3.0, 20.0};
  }
  throw std::logic_error("unknown data kind");
}

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Two independent N(0, 1) values for counter `i` of stream `seed` (Box-Muller on one hash).
std::pair<float, float> normal_pair(uint64_t seed, uint64_t i) {
  uint64_t h = mix64(seed ^ mix64(i));
  float u1 = (float(h >> 40) + 0.5f) * (1.f / 16777216.f);
  float u2 = float((h >> 16) & 0xffffffu) * (1.f / 16777216.f);
  float r = std::sqrt(-2.f * std::log(u1)), a = 6.2831853f * u2;
  return {r * std::cos(a), r * std::sin(a)};
}

// f(begin, end) over [0, n) split across the host's cores.
template <class F>
void parallel_for(int64_t n, F&& f) {
  const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
  const int64_t chunk = std::max<int64_t>(1, (n + workers - 1) / workers);
  std::vector<std::thread> pool;
  for (int64_t b = 0; b < n; b += chunk) pool.emplace_back(f, b, std::min(n, b + chunk));
  for (std::thread& t : pool) t.join();
}

// out[i] = bf16(N(0, 1)) for i in [0, n), from stream `seed`.
void fill_normal_bf16(uint16_t* out, int64_t n, uint64_t seed) {
  parallel_for((n + 1) / 2, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      auto [a, b] = normal_pair(seed, uint64_t(p));
      out[2 * p] = to_bf16(a);
      if (2 * p + 1 < n) out[2 * p + 1] = to_bf16(b);
    }
  });
}

struct TargetRow {
  int segment = 0;
  int64_t row = 0;  // weight row within the segment
};

// Hidden states: per row, noise of std `noise` over the first `cols` columns plus
// lift * C[t] / |C[t]|^2 there; columns past `cols` (the prior's) are 1.
std::vector<uint16_t> make_hidden(const CeDataSpec& spec, const KindShape& k, int64_t cols,
                                  const std::vector<std::vector<uint16_t>>& weights,
                                  const std::vector<TargetRow>& picks, uint64_t seed) {
  const int64_t D = spec.dim;
  std::vector<uint16_t> e(size_t(spec.rows * D));
  const float scale = float(k.noise / std::sqrt(double(cols)));
  parallel_for(spec.rows, [&](int64_t begin, int64_t end) {
    std::vector<float> noise(D + 1);
    for (int64_t r = begin; r < end; ++r) {
      const uint16_t* ct = weights[picks[r].segment].data() + picks[r].row * D;
      double sq = 0;
      for (int64_t c = 0; c < cols; ++c) sq += double(from_bf16(ct[c])) * from_bf16(ct[c]);
      const float gain = sq > 0 ? float(k.lift / sq) : 0.f;
      for (int64_t c = 0; c < D; c += 2) {  // D is even: rows start on a pair
        auto [a, b] = normal_pair(seed, uint64_t((r * D + c) / 2));
        noise[c] = a, noise[c + 1] = b;
      }
      for (int64_t c = 0; c < D; ++c)
        e[r * D + c] = to_bf16(c < cols ? scale * noise[c] + gain * from_bf16(ct[c]) : 1.f);
    }
  });
  return e;
}

}  // namespace

std::optional<CeDataKind> parse_ce_data_kind(std::string_view name) {
  if (name == "zipf") return CeDataKind::Zipf;
  if (name == "flat") return CeDataKind::Flat;
  if (name == "peaked" || name == "peaked-random") return CeDataKind::Peaked;
  return std::nullopt;
}

std::string_view ce_data_kind_name(CeDataKind kind) {
  switch (kind) {
    case CeDataKind::Zipf: return "zipf";
    case CeDataKind::Flat: return "flat";
    case CeDataKind::Peaked: return "peaked";
  }
  return "?";
}

CeHostData make_ce_data(const CeDataSpec& spec) {
  if (spec.rows <= 0 || spec.dim < 2 || spec.dim % 2 || spec.segments.empty())
    throw std::invalid_argument("make_ce_data: rows > 0, an even dim >= 2 and a segment needed");
  const KindShape k = shape_of(spec.kind);
  const int64_t D = spec.dim, cols = k.zipf > 0 ? D - 1 : D;
  int64_t live = 0;
  for (const auto& s : spec.segments) live += s.second;

  // The unigram log-prior over the live ids (a shuffled rank each), flat without one.
  std::mt19937_64 rng(spec.seed);
  std::vector<int64_t> rank(static_cast<size_t>(live));
  std::iota(rank.begin(), rank.end(), int64_t{1});
  std::shuffle(rank.begin(), rank.end(), rng);
  std::vector<float> prior(static_cast<size_t>(live));
  std::vector<double> cdf(static_cast<size_t>(live));
  double total = 0;
  for (int64_t i = 0; i < live; ++i) {
    prior[i] = float(-k.zipf * std::log(double(rank[i])));
    total += std::exp(double(prior[i]));
    cdf[i] = total;
  }

  CeHostData out;
  int64_t first_live = 0;
  for (size_t s = 0; s < spec.segments.size(); ++s) {
    const int64_t V = spec.segments[s].second;
    std::vector<uint16_t> w(size_t(V * D));
    fill_normal_bf16(w.data(), V * D, mix64(spec.seed * 977 + s));
    if (k.zipf > 0)
      for (int64_t r = 0; r < V; ++r) w[r * D + D - 1] = to_bf16(prior[first_live + r]);
    out.weights.push_back(std::move(w));
    first_live += V;
  }

  // Targets from the prior; a fraction of rows ignored afterwards (their lift stays).
  std::uniform_real_distribution<double> uniform(0, 1);
  std::vector<TargetRow> picks(size_t(spec.rows));
  out.targets.resize(size_t(spec.rows));
  for (int64_t r = 0; r < spec.rows; ++r) {
    int64_t j = std::lower_bound(cdf.begin(), cdf.end(), uniform(rng) * total) - cdf.begin();
    j = std::min(j, live - 1);
    int s = 0;
    while (j >= spec.segments[s].second) j -= spec.segments[s++].second;
    picks[r] = {s, j};
    const bool ignored = uniform(rng) < spec.ignored;
    out.targets[r] = ignored ? kCeIgnoreIndex : int32_t(spec.segments[s].first + j);
    out.kept_rows += !ignored;
  }
  out.hidden = make_hidden(spec, k, cols, out.weights, picks, mix64(spec.seed * 7919));
  if (spec.teacher)
    out.teacher_hidden = make_hidden(spec, k, cols, out.weights, picks, mix64(spec.seed * 7927));
  return out;
}

}  // namespace tilejit::bench
