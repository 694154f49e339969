#include "tests/support/LinearCeReference.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace tilejit::testing {
namespace {

// Runs body(i) for i in [0, n) on up to `threads` threads, in contiguous blocks.
template <class Body>
void parallel_for(int64_t n, int threads, Body body) {
  int t = std::max(1, std::min<int>(threads, static_cast<int>(std::max<int64_t>(n, 1))));
  std::vector<std::thread> pool;
  int64_t per = (n + t - 1) / t;
  for (int j = 0; j < t; ++j) {
    int64_t a = j * per, b = std::min(n, a + per);
    if (a >= b) break;
    pool.emplace_back([=] {
      for (int64_t i = a; i < b; ++i) body(i);
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

RefLinearCeResult reference_linear_ce(const RefLinearCe& p, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t n = p.n_rows, d = p.dim;
  int64_t live = 0;
  for (const auto& s : p.segments) live += s.size;
  // Column c of the concatenated live vocabulary -> (segment, row).
  std::vector<std::pair<int, int64_t>> cols;
  for (size_t s = 0; s < p.segments.size(); ++s)
    for (int64_t v = 0; v < p.segments[s].size; ++v) cols.emplace_back(static_cast<int>(s), v);

  int64_t kept = 0;
  for (int64_t r = 0; r < n; ++r) kept += p.targets[r] != p.ignore_index;
  auto upstream = [&](int64_t r) -> double {
    double u = p.upstream ? (p.reduction == RefReduction::None ? p.upstream[r] : p.upstream[0]) : 1;
    return p.reduction == RefReduction::Mean ? (kept ? u / kept : 0.0) : u;
  };

  RefLinearCeResult out;
  out.row_loss.assign(n, 0);
  out.lse.assign(n, 0);
  out.d_hidden.assign(n * d, 0);
  // dL/dx for every (kept row, live column): kept for the weight gradients.
  std::vector<double> g(n * live, 0);
  const double eps = p.label_smoothing, lam = p.z_loss;

  parallel_for(n, threads, [&](int64_t r) {
    const int32_t t = p.targets[r];
    if (t == p.ignore_index) return;
    std::vector<double> x(live), z(live);
    const float* e = p.hidden + r * d;
    double mx = -INFINITY, zt = 0, zsum = 0;
    for (int64_t c = 0; c < live; ++c) {
      const RefSegment& s = p.segments[cols[c].first];
      const float* w = s.weight + cols[c].second * d;
      double acc = s.bias ? s.bias[cols[c].second] : 0.0;
      for (int64_t k = 0; k < d; ++k) acc += static_cast<double>(e[k]) * w[k];
      x[c] = acc;
      int64_t id = s.begin + cols[c].second;
      z[c] = p.logit_mod ? p.logit_mod(acc, r, id) : acc;
      mx = std::max(mx, z[c]);
      zsum += z[c];
      if (id == t) zt = z[c];
    }
    double sum = 0;
    for (int64_t c = 0; c < live; ++c) sum += std::exp(z[c] - mx);
    double lse = mx + std::log(sum);
    out.lse[r] = lse;
    out.row_loss[r] = (1 - eps) * (lse - zt) + eps * (lse - zsum / live) + lam * lse * lse;
    double u = upstream(r);
    double* gr = g.data() + r * live;
    double* de = out.d_hidden.data() + r * d;
    for (int64_t c = 0; c < live; ++c) {
      const RefSegment& s = p.segments[cols[c].first];
      int64_t id = s.begin + cols[c].second;
      double pr = std::exp(z[c] - lse);
      double dz = pr * (1 + 2 * lam * lse) - (id == t ? 1 - eps : 0) - eps / live;
      double lg = p.logit_grad ? p.logit_grad(x[c], r, id) : 1.0;
      gr[c] = u * dz * lg;
      const float* w = s.weight + cols[c].second * d;
      for (int64_t k = 0; k < d; ++k) de[k] += gr[c] * w[k];
    }
  });

  double total = 0;
  for (int64_t r = 0; r < n; ++r) total += out.row_loss[r];
  out.loss = p.reduction == RefReduction::Mean ? (kept ? total / kept : 0.0) : total;

  out.d_weight.resize(p.segments.size());
  out.d_bias.resize(p.segments.size());
  for (size_t s = 0; s < p.segments.size(); ++s) {
    out.d_weight[s].assign(p.segments[s].size * d, 0);
    if (p.segments[s].bias) out.d_bias[s].assign(p.segments[s].size, 0);
  }
  parallel_for(live, threads, [&](int64_t c) {
    auto [s, v] = cols[c];
    double* dw = out.d_weight[s].data() + v * d;
    double db = 0;
    for (int64_t r = 0; r < n; ++r) {
      double gv = g[r * live + c];
      if (gv == 0) continue;
      db += gv;
      const float* e = p.hidden + r * d;
      for (int64_t k = 0; k < d; ++k) dw[k] += gv * e[k];
    }
    if (!out.d_bias[s].empty()) out.d_bias[s][v] = db;
  });
  return out;
}

}  // namespace tilejit::testing
