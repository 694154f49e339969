#include "tests/support/AttentionReference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>

namespace tilejit::testing {

namespace {

// Runs body(i) for i in [0, n) on all hardware threads.
template <class F>
void parallel_for(int n, const F& body) {
  int workers = std::max(1u, std::thread::hardware_concurrency());
  workers = std::min(workers, std::max(n, 1));
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) body(i);
    });
  for (auto& t : pool) t.join();
}

struct Head {
  const AttentionRefShape& s;
  const AttentionRefHooks& hooks;
  int b, h, hk;

  const double* row(const std::vector<double>& t, int heads, int head, int seq, int i) const {
    return t.data() + ((static_cast<size_t>(b) * heads + head) * seq + i) * s.head_dim;
  }
  bool keep(int q, int kv) const { return !hooks.mask || hooks.mask(b, h, q, kv); }
  double raw(const std::vector<double>& q, const std::vector<double>& k, int i, int j) const {
    const double* qr = row(q, s.heads_q, h, s.seq_q, i);
    const double* kr = row(k, s.heads_kv, hk, s.seq_kv, j);
    double dot = 0;
    for (int d = 0; d < s.head_dim; ++d) dot += qr[d] * kr[d];
    return s.scale * dot;
  }
  double modded(double x, int i, int j) const {
    return hooks.score ? hooks.score(x, b, h, i, j) : x;
  }

  // Probabilities of row i (0 where masked) and its lse; returns false for an empty row.
  bool probs(const std::vector<double>& q, const std::vector<double>& k, int i,
             std::vector<double>& p, std::vector<double>& raw_scores, double& lse) const {
    double mx = -std::numeric_limits<double>::infinity();
    std::vector<char> on(s.seq_kv);
    for (int j = 0; j < s.seq_kv; ++j) {
      on[j] = keep(i, j);
      raw_scores[j] = on[j] ? raw(q, k, i, j) : 0;
      p[j] = on[j] ? modded(raw_scores[j], i, j) : 0;
      if (on[j]) mx = std::isnan(p[j]) || std::isnan(mx) ? p[j] : std::max(mx, p[j]);
    }
    if (std::isnan(mx)) {  // IEEE: a NaN score at an unmasked element makes the row NaN
      std::fill(p.begin(), p.end(), mx);
      lse = mx;
      return true;
    }
    if (mx == -std::numeric_limits<double>::infinity()) {
      std::fill(p.begin(), p.end(), 0.0);
      lse = -std::numeric_limits<double>::infinity();
      return false;
    }
    double sum = 0;
    for (int j = 0; j < s.seq_kv; ++j) {
      p[j] = on[j] ? std::exp(p[j] - mx) : 0;
      sum += p[j];
    }
    for (int j = 0; j < s.seq_kv; ++j) p[j] /= sum;
    lse = mx + std::log(sum);
    return true;
  }
};

}  // namespace

AttentionRefForward attention_forward_reference(const AttentionRefShape& s,
                                                const AttentionRefHooks& hooks,
                                                const std::vector<double>& q,
                                                const std::vector<double>& k,
                                                const std::vector<double>& v) {
  AttentionRefForward r;
  const int D = s.head_dim, group = s.heads_q / s.heads_kv;
  r.out.assign(static_cast<size_t>(s.batch) * s.heads_q * s.seq_q * D, 0.0);
  r.lse.assign(static_cast<size_t>(s.batch) * s.heads_q * s.seq_q, 0.0);
  parallel_for(s.batch * s.heads_q * s.seq_q, [&](int idx) {
    int i = idx % s.seq_q, bh = idx / s.seq_q, b = bh / s.heads_q, h = bh % s.heads_q;
    Head hd{s, hooks, b, h, h / group};
    std::vector<double> p(s.seq_kv), raw(s.seq_kv);
    double lse;
    hd.probs(q, k, i, p, raw, lse);
    r.lse[idx] = lse;
    double* o = r.out.data() + static_cast<size_t>(idx) * D;
    for (int j = 0; j < s.seq_kv; ++j) {
      if (p[j] == 0) continue;
      const double* vr = hd.row(v, s.heads_kv, hd.hk, s.seq_kv, j);
      for (int d = 0; d < D; ++d) o[d] += p[j] * vr[d];
    }
  });
  return r;
}

AttentionRefBackward attention_backward_reference(
    const AttentionRefShape& s, const AttentionRefHooks& hooks, const std::vector<double>& q,
    const std::vector<double>& k, const std::vector<double>& v, const std::vector<double>& d_out,
    const std::vector<double>* out) {
  AttentionRefBackward r;
  const int D = s.head_dim, group = s.heads_q / s.heads_kv;
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  const size_t plane = static_cast<size_t>(s.seq_q) * s.seq_kv;
  for (int b = 0; b < s.batch; ++b)
    for (int h = 0; h < s.heads_q; ++h) {
      Head hd{s, hooks, b, h, h / group};
      // P and dS (gradient w.r.t. the raw score scale * <q, k>) of the whole (b, h) plane.
      std::vector<double> P(plane), dS(plane);
      parallel_for(s.seq_q, [&](int i) {
        std::vector<double> p(s.seq_kv), raw(s.seq_kv), dp(s.seq_kv);
        double lse;
        bool live = hd.probs(q, k, i, p, raw, lse);
        const double* go = hd.row(d_out, s.heads_q, h, s.seq_q, i);
        double delta = 0;
        for (int j = 0; j < s.seq_kv; ++j) {
          dp[j] = 0;
          if (!live || p[j] == 0) continue;
          const double* vr = hd.row(v, s.heads_kv, hd.hk, s.seq_kv, j);
          for (int d = 0; d < D; ++d) dp[j] += go[d] * vr[d];
          delta += p[j] * dp[j];
        }
        if (out && live) {  // delta from the output the backward is given
          const double* o = hd.row(*out, s.heads_q, h, s.seq_q, i);
          delta = 0;
          for (int d = 0; d < D; ++d) delta += go[d] * o[d];
        }
        for (int j = 0; j < s.seq_kv; ++j) {
          double ds = p[j] * (dp[j] - delta);
          if (p[j] != 0 && hooks.score_grad) ds *= hooks.score_grad(raw[j], b, h, i, j);
          P[static_cast<size_t>(i) * s.seq_kv + j] = p[j];
          dS[static_cast<size_t>(i) * s.seq_kv + j] = ds;
        }
        double* dq = r.dq.data() + ((static_cast<size_t>(b) * s.heads_q + h) * s.seq_q + i) * D;
        for (int j = 0; j < s.seq_kv; ++j) {
          if (dS[static_cast<size_t>(i) * s.seq_kv + j] == 0) continue;
          const double* kr = hd.row(k, s.heads_kv, hd.hk, s.seq_kv, j);
          for (int d = 0; d < D; ++d)
            dq[d] += s.scale * dS[static_cast<size_t>(i) * s.seq_kv + j] * kr[d];
        }
      });
      parallel_for(s.seq_kv, [&](int j) {
        double* dk =
            r.dk.data() + ((static_cast<size_t>(b) * s.heads_kv + hd.hk) * s.seq_kv + j) * D;
        double* dv =
            r.dv.data() + ((static_cast<size_t>(b) * s.heads_kv + hd.hk) * s.seq_kv + j) * D;
        for (int i = 0; i < s.seq_q; ++i) {
          double p = P[static_cast<size_t>(i) * s.seq_kv + j],
                 ds = dS[static_cast<size_t>(i) * s.seq_kv + j];
          if (p == 0 && ds == 0) continue;
          const double* qr = hd.row(q, s.heads_q, h, s.seq_q, i);
          const double* go = hd.row(d_out, s.heads_q, h, s.seq_q, i);
          for (int d = 0; d < D; ++d) {
            dv[d] += p * go[d];
            dk[d] += s.scale * ds * qr[d];
          }
        }
      });
    }
  return r;
}

}  // namespace tilejit::testing
