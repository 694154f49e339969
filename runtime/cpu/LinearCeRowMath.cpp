#include "runtime/cpu/LinearCeRowMath.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/RowMath.h"

namespace tilejit::cpu {

namespace {

float max_of(const float* x, int n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

}  // namespace

LossTerms LossTerms::of(const LossProgram& p) {
  LossTerms k;
  k.eps = static_cast<float>(p.label_smoothing);
  k.lambda = static_cast<float>(p.z_loss);
  k.live = static_cast<float>(p.live_ids());
  if (p.kl) {
    k.kl = true;
    k.alpha = static_cast<float>(p.kl->alpha);
    k.temperature = static_cast<float>(p.kl->temperature);
    k.inv_t = static_cast<float>(1.0 / p.kl->temperature);
  }
  k.ce_probs = k.alpha < 1 || k.lambda > 0;
  return k;
}

void LossRowStats::add(const float* z, int n, int64_t target, float* scratch) {
  double zs = 0;
  for (int j = 0; j < n; ++j) zs += z[j];
  zsum_ += zs;
  if (target >= 0 && target < n) target_ = z[target];
  const float m_new = std::max(m_, max_of(z, n));
  if (m_new == kNegInf) return;
  std::memcpy(scratch, z, n * sizeof(float));
  l_ = l_ * softmax_exp(m_ - m_new) + exp_shifted(scratch, n, m_new);
  m_ = m_new;
}

void LossRowStats::add_kl(const LossTerms& k, const float* z, const float* tz, int n,
                          float* scratch) {
  float *ys = scratch, *yt = scratch + n, *w = scratch + 2 * n;
  for (int j = 0; j < n; ++j) ys[j] = z[j] * k.inv_t, yt[j] = tz[j] * k.inv_t;
  const float ms_new = std::max(ms_, max_of(ys, n));
  if (ms_new != kNegInf) {
    std::memcpy(w, ys, n * sizeof(float));
    ls_ = ls_ * softmax_exp(ms_ - ms_new) + exp_shifted(w, n, ms_new);
    ms_ = ms_new;
  }
  const float mt_new = std::max(mt_, max_of(yt, n));
  if (mt_new == kNegInf) return;  // the teacher puts no mass here
  std::memcpy(w, yt, n * sizeof(float));
  const float scale = softmax_exp(mt_ - mt_new);
  lt_ = lt_ * scale + exp_shifted(w, n, mt_new);
  double cross = 0;
  for (int j = 0; j < n; ++j)
    if (w[j] > 0) cross += static_cast<double>(w[j]) * (yt[j] - ys[j]);
  cross_ = cross_ * scale + cross;
  mt_ = mt_new;
}

LossRowStats::Result LossRowStats::finish(const LossTerms& k) const {
  Result r;
  r.lse = m_ + std::log(l_);
  r.target_logit = target_;
  const float mean = static_cast<float>(zsum_ / static_cast<double>(k.live));
  const float ce = (1 - k.eps) * (r.lse - target_) + k.eps * (r.lse - mean);
  r.row_loss = (1 - k.alpha) * ce + k.lambda * r.lse * r.lse;
  if (k.kl) {
    r.tempered_lse = ms_ + std::log(ls_);
    r.teacher_lse = mt_ + std::log(lt_);
    const float kl = static_cast<float>(cross_ / lt_) - r.teacher_lse + r.tempered_lse;
    r.row_loss += k.alpha * k.temperature * k.temperature * kl;
  }
  return r;
}

RowGradTerms row_grad_terms(const LossTerms& k, float u, float lse, float tempered_lse,
                            float teacher_lse) {
  RowGradTerms r;
  r.lse = lse;
  r.p_scale = u * ((1 - k.alpha) + 2 * k.lambda * lse);
  r.uniform = u * (1 - k.alpha) * k.eps / k.live;
  r.target = u * (1 - k.alpha) * (1 - k.eps);
  if (k.kl) {
    r.kl_scale = u * k.alpha * k.temperature;
    r.tempered_lse = tempered_lse;
    r.teacher_lse = teacher_lse;
  }
  return r;
}

bool chunk_gradient(const LossTerms& k, const RowGradTerms& r, const float* z, const float* tz,
                    int n, int64_t target, float threshold, float* g) {
  const bool has_target = target >= 0 && target < n;
  int hot = 0;
  for (int j = 0; j < n; ++j) {
    const float p = softmax_exp(z[j] - r.lse);
    g[j] = r.p_scale * p - r.uniform;
    hot += k.ce_probs && p >= threshold;
  }
  if (k.kl) {
    for (int j = 0; j < n; ++j) {
      const float q = softmax_exp(z[j] * k.inv_t - r.tempered_lse);
      const float pt = softmax_exp(tz[j] * k.inv_t - r.teacher_lse);
      g[j] += r.kl_scale * (q - pt);
      hot += (q >= threshold) + (pt >= threshold);
    }
  }
  if (!has_target) return threshold <= 0 || hot > 0;
  g[target] -= r.target;
  // The target entry is always kept: its probabilities do not make the chunk hot.
  const float zy = z[target];
  hot -= k.ce_probs && softmax_exp(zy - r.lse) >= threshold;
  if (k.kl) {
    hot -= softmax_exp(zy * k.inv_t - r.tempered_lse) >= threshold;
    hot -= softmax_exp(tz[target] * k.inv_t - r.teacher_lse) >= threshold;
  }
  return threshold <= 0 || hot > 0;
}

}  // namespace tilejit::cpu
