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

double log_sum_exp(const std::vector<double>& v) {
  double mx = -INFINITY;
  for (double x : v) mx = std::max(mx, x);
  if (mx == -INFINITY) return mx;
  double sum = 0;
  for (double x : v) sum += std::exp(x - mx);
  return mx + std::log(sum);
}

// The weight row and bias of a global id in a layout (nullptr when no segment holds it).
struct LayoutRow {
  const float* weight = nullptr;
  double bias = 0;
};
LayoutRow find_row(const std::vector<RefSegment>& segments, int64_t id, int64_t dim) {
  for (const RefSegment& s : segments)
    if (id >= s.begin && id < s.begin + s.size)
      return {s.weight + (id - s.begin) * dim, s.bias ? double{s.bias[id - s.begin]} : 0.0};
  return {};
}

double dot(const float* a, const float* b, int64_t n) {
  double acc = 0;
  for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(a[k]) * b[k];
  return acc;
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

  const bool kl = p.kl.has_value();
  const double alpha = kl ? p.kl->alpha : 0.0, temp = kl ? p.kl->temperature : 1.0;
  const std::vector<RefSegment>& teacher_segments =
      kl && !p.kl->teacher_segments.empty() ? p.kl->teacher_segments : p.segments;
  const int64_t teacher_dim = kl && !p.kl->teacher_segments.empty() ? p.kl->teacher_dim : d;
  const double thr = p.filter_threshold;
  // Which probabilities enter the gradient (and so decide whether an entry is negligible).
  const bool ce_probs = 1 - alpha > 0 || p.z_loss > 0;

  RefLinearCeResult out;
  out.row_loss.assign(n, 0);
  out.lse.assign(n, 0);
  if (kl) {
    out.tempered_lse.assign(n, 0);
    out.teacher_lse.assign(n, 0);
  }
  out.d_hidden.assign(n * d, 0);
  if (thr > 0) out.d_hidden_slack.assign(n * d, 0);
  // dL/dx for every (kept row, live column), and what a filter may drop of it: kept for the
  // weight gradients.
  std::vector<double> g(n * live, 0), slack(thr > 0 ? n * live : 0, 0);
  const double eps = p.label_smoothing, lam = p.z_loss;

  parallel_for(n, threads, [&](int64_t r) {
    const int32_t t = p.targets[r];
    if (t == p.ignore_index) return;
    std::vector<double> x(live), z(live), tz(kl ? live : 0);
    const float* e = p.hidden + r * d;
    double zt = 0, zsum = 0;
    for (int64_t c = 0; c < live; ++c) {
      const RefSegment& s = p.segments[cols[c].first];
      const int64_t id = s.begin + cols[c].second;
      x[c] = dot(e, s.weight + cols[c].second * d, d) + (s.bias ? s.bias[cols[c].second] : 0.0);
      z[c] = p.logit_mod ? p.logit_mod(x[c], r, id) : x[c];
      zsum += z[c];
      if (id == t) zt = z[c];
      if (kl) {
        LayoutRow tr = find_row(teacher_segments, id, teacher_dim);
        double raw = dot(p.kl->teacher_hidden + r * teacher_dim, tr.weight, teacher_dim) + tr.bias;
        tz[c] = p.logit_mod ? p.logit_mod(raw, r, id) : raw;
      }
    }
    const double lse = log_sum_exp(z);
    out.lse[r] = lse;
    double loss =
        (1 - alpha) * ((1 - eps) * (lse - zt) + eps * (lse - zsum / live)) + lam * lse * lse;
    // KL(p_t || p_s) at temperature T, times T^2.
    std::vector<double> ys(kl ? live : 0), yt(kl ? live : 0);
    double lse_s = 0, lse_t = 0;
    if (kl) {
      for (int64_t c = 0; c < live; ++c) ys[c] = z[c] / temp, yt[c] = tz[c] / temp;
      lse_s = log_sum_exp(ys);
      lse_t = log_sum_exp(yt);
      double div = 0;
      for (int64_t c = 0; c < live; ++c) {
        double pt = std::exp(yt[c] - lse_t);
        if (pt > 0) div += pt * ((yt[c] - lse_t) - (ys[c] - lse_s));
      }
      out.tempered_lse[r] = lse_s;
      out.teacher_lse[r] = lse_t;
      loss += alpha * temp * temp * div;
    }
    out.row_loss[r] = loss;

    const double u = upstream(r);
    double* gr = g.data() + r * live;
    double* de = out.d_hidden.data() + r * d;
    for (int64_t c = 0; c < live; ++c) {
      const RefSegment& s = p.segments[cols[c].first];
      const int64_t id = s.begin + cols[c].second;
      const double pr = std::exp(z[c] - lse);
      const double q = kl ? std::exp(ys[c] - lse_s) : 0.0, pt = kl ? std::exp(yt[c] - lse_t) : 0.0;
      const double uniform = (1 - alpha) * eps / live;
      double dz = (1 - alpha) * (pr - (id == t ? 1 - eps : 0)) + 2 * lam * lse * pr - uniform;
      if (kl) dz += alpha * temp * (q - pt);
      const double lg = p.logit_grad ? p.logit_grad(x[c], r, id) : 1.0;
      gr[c] = u * dz * lg;
      const float* w = s.weight + cols[c].second * d;
      for (int64_t k = 0; k < d; ++k) de[k] += gr[c] * w[k];
      const bool negligible = id != t && (!ce_probs || pr < thr) && (!kl || (q < thr && pt < thr));
      if (thr > 0 && negligible) {
        const double dropped = std::fabs(gr[c] + u * uniform * lg);
        slack[r * live + c] = dropped;
        for (int64_t k = 0; k < d; ++k) out.d_hidden_slack[r * d + k] += dropped * std::fabs(w[k]);
      }
    }
  });

  double total = 0;
  for (int64_t r = 0; r < n; ++r) total += out.row_loss[r];
  out.loss = p.reduction == RefReduction::Mean ? (kept ? total / kept : 0.0) : total;

  const size_t ns = p.segments.size();
  out.d_weight.resize(ns);
  out.d_bias.resize(ns);
  if (thr > 0) {
    out.d_weight_slack.resize(ns);
    out.d_bias_slack.resize(ns);
  }
  for (size_t s = 0; s < ns; ++s) {
    out.d_weight[s].assign(p.segments[s].size * d, 0);
    if (p.segments[s].bias) out.d_bias[s].assign(p.segments[s].size, 0);
    if (thr > 0) {
      out.d_weight_slack[s].assign(p.segments[s].size * d, 0);
      if (p.segments[s].bias) out.d_bias_slack[s].assign(p.segments[s].size, 0);
    }
  }
  parallel_for(live, threads, [&](int64_t c) {
    auto [s, v] = cols[c];
    double* dw = out.d_weight[s].data() + v * d;
    double db = 0, db_slack = 0;
    for (int64_t r = 0; r < n; ++r) {
      const double gv = g[r * live + c], sv = thr > 0 ? slack[r * live + c] : 0.0;
      const float* e = p.hidden + r * d;
      if (sv != 0) {
        db_slack += sv;
        double* ws = out.d_weight_slack[s].data() + v * d;
        for (int64_t k = 0; k < d; ++k) ws[k] += sv * std::fabs(e[k]);
      }
      if (gv == 0) continue;
      db += gv;
      for (int64_t k = 0; k < d; ++k) dw[k] += gv * e[k];
    }
    if (!out.d_bias[s].empty()) out.d_bias[s][v] = db;
    if (thr > 0 && !out.d_bias_slack[s].empty()) out.d_bias_slack[s][v] = db_slack;
  });
  return out;
}

}  // namespace tilejit::testing
