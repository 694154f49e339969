#include "capi_reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- attention ------------------------------------------------------------------------- */

static size_t at4(int d1, int d2, int d3, int i0, int i1, int i2, int i3) {
  return (((size_t)i0 * d1 + i1) * d2 + i2) * d3 + i3;
}

/* Probabilities of row (b, h, i) over kv, raw scores into `raw`; returns the lse. */
static double row_probabilities(const ref_attention* p, const double* q, const double* k, int b,
                                int h, int i, double* raw, double* prob) {
  const int kvh = h / (p->heads_q / p->heads_kv);
  double m = -INFINITY;
  for (int j = 0; j < p->seq_kv; ++j) {
    double s = 0;
    for (int d = 0; d < p->dim; ++d)
      s += q[at4(p->heads_q, p->seq_q, p->dim, b, h, i, d)] *
           k[at4(p->heads_kv, p->seq_kv, p->dim, b, kvh, j, d)];
    raw[j] = s * p->scale;
    prob[j] = -INFINITY;
    if (!p->mask(p->ctx, b, h, i, j)) continue;
    prob[j] = p->score ? p->score(p->ctx, raw[j]) : raw[j];
    if (prob[j] > m) m = prob[j];
  }
  if (m == -INFINITY) {
    for (int j = 0; j < p->seq_kv; ++j) prob[j] = 0;
    return -INFINITY;
  }
  double sum = 0;
  for (int j = 0; j < p->seq_kv; ++j) sum += prob[j] == -INFINITY ? 0 : exp(prob[j] - m);
  const double lse = m + log(sum);
  for (int j = 0; j < p->seq_kv; ++j) prob[j] = prob[j] == -INFINITY ? 0 : exp(prob[j] - lse);
  return lse;
}

void ref_attention_forward(const ref_attention* p, const double* q, const double* k,
                           const double* v, double* out, double* lse) {
  double* raw = malloc(sizeof(double) * p->seq_kv);
  double* prob = malloc(sizeof(double) * p->seq_kv);
  for (int b = 0; b < p->batch; ++b)
    for (int h = 0; h < p->heads_q; ++h)
      for (int i = 0; i < p->seq_q; ++i) {
        const int kvh = h / (p->heads_q / p->heads_kv);
        lse[((size_t)b * p->heads_q + h) * p->seq_q + i] =
            row_probabilities(p, q, k, b, h, i, raw, prob);
        for (int d = 0; d < p->dim; ++d) {
          double o = 0;
          for (int j = 0; j < p->seq_kv; ++j)
            o += prob[j] * v[at4(p->heads_kv, p->seq_kv, p->dim, b, kvh, j, d)];
          out[at4(p->heads_q, p->seq_q, p->dim, b, h, i, d)] = o;
        }
      }
  free(raw);
  free(prob);
}

void ref_attention_backward(const ref_attention* p, const double* q, const double* k,
                            const double* v, const double* d_out, double* dq, double* dk,
                            double* dv) {
  const size_t nq = (size_t)p->batch * p->heads_q * p->seq_q * p->dim;
  const size_t nk = (size_t)p->batch * p->heads_kv * p->seq_kv * p->dim;
  memset(dq, 0, sizeof(double) * nq);
  memset(dk, 0, sizeof(double) * nk);
  memset(dv, 0, sizeof(double) * nk);
  double* raw = malloc(sizeof(double) * p->seq_kv);
  double* prob = malloc(sizeof(double) * p->seq_kv);
  double* dp = malloc(sizeof(double) * p->seq_kv);
  for (int b = 0; b < p->batch; ++b)
    for (int h = 0; h < p->heads_q; ++h)
      for (int i = 0; i < p->seq_q; ++i) {
        const int kvh = h / (p->heads_q / p->heads_kv);
        const double* go = &d_out[at4(p->heads_q, p->seq_q, p->dim, b, h, i, 0)];
        row_probabilities(p, q, k, b, h, i, raw, prob);
        double delta = 0; /* sum_j P_ij dP_ij */
        for (int j = 0; j < p->seq_kv; ++j) {
          const double* vj = &v[at4(p->heads_kv, p->seq_kv, p->dim, b, kvh, j, 0)];
          dp[j] = 0;
          for (int d = 0; d < p->dim; ++d) dp[j] += go[d] * vj[d];
          delta += prob[j] * dp[j];
        }
        for (int j = 0; j < p->seq_kv; ++j) {
          if (prob[j] == 0) continue;
          const double grad = p->score_grad ? p->score_grad(p->ctx, raw[j]) : 1.0;
          const double ds = prob[j] * (dp[j] - delta) * grad * p->scale;
          const size_t kj = at4(p->heads_kv, p->seq_kv, p->dim, b, kvh, j, 0);
          const size_t qi = at4(p->heads_q, p->seq_q, p->dim, b, h, i, 0);
          for (int d = 0; d < p->dim; ++d) {
            dq[qi + d] += ds * k[kj + d];
            dk[kj + d] += ds * q[qi + d];
            dv[kj + d] += prob[j] * go[d];
          }
        }
      }
  free(raw);
  free(prob);
  free(dp);
}

/* ---- loss ------------------------------------------------------------------------------ */

static int64_t live_ids(const ref_loss* p) {
  int64_t n = 0;
  for (int s = 0; s < p->num_segments; ++s) n += p->segments[s].size;
  return n;
}

static int64_t kept_rows(const ref_loss* p, const int64_t* targets) {
  int64_t n = 0;
  for (int64_t r = 0; r < p->rows; ++r) n += targets[r] != p->ignore_index;
  return n;
}

static double logit_mod(const ref_loss* p, double x) {
  return p->cap > 0 ? p->cap * tanh(x / p->cap) : x;
}

/* Raw logits of one row for every live id, in segment order, and the modded ones. */
static void row_logits(const ref_loss* p, const double* e, double* raw, double* z) {
  int64_t at = 0;
  for (int s = 0; s < p->num_segments; ++s) {
    const ref_segment* g = &p->segments[s];
    for (int64_t v = 0; v < g->size; ++v, ++at) {
      double x = g->bias ? g->bias[v] : 0;
      for (int64_t d = 0; d < p->dim; ++d) x += e[d] * g->weight[v * p->dim + d];
      raw[at] = x;
      z[at] = logit_mod(p, x);
    }
  }
}

/* The teacher's modded logits of one row, in the student's live-id order. */
static void teacher_logits(const ref_loss* p, const double* et, double* z) {
  int64_t at = 0;
  for (int s = 0; s < p->num_segments; ++s)
    for (int64_t v = 0; v < p->segments[s].size; ++v, ++at) {
      const int64_t id = p->segments[s].begin + v;
      for (int t = 0; t < p->num_teacher_segments; ++t) {
        const ref_segment* g = &p->teacher_segments[t];
        if (id < g->begin || id >= g->begin + g->size) continue;
        double x = g->bias ? g->bias[id - g->begin] : 0;
        for (int64_t d = 0; d < p->teacher_dim; ++d)
          x += et[d] * g->weight[(id - g->begin) * p->teacher_dim + d];
        z[at] = logit_mod(p, x);
      }
    }
}

/* The position of global id t among the live ids (-1 if dead). */
static int64_t live_index(const ref_loss* p, int64_t t) {
  int64_t at = 0;
  for (int s = 0; s < p->num_segments; ++s) {
    const ref_segment* g = &p->segments[s];
    if (t >= g->begin && t < g->begin + g->size) return at + (t - g->begin);
    at += g->size;
  }
  return -1;
}

/* log sum_j exp(z_j / temp) */
static double log_sum_exp(const double* z, int64_t n, double temp) {
  double m = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; ++j) m = z[j] / temp > m ? z[j] / temp : m;
  for (int64_t j = 0; j < n; ++j) sum += exp(z[j] / temp - m);
  return m + log(sum);
}

/* A kept row r: returns its loss and lse; with `g`, also d row_loss / d raw logit (times u). */
static double row_loss_of(const ref_loss* p, const double* hidden, int64_t r, int64_t target,
                          double u, double* lse_out, double* g) {
  const int64_t live = live_ids(p), y = live_index(p, target);
  const double eps = p->label_smoothing, alpha = p->kl_alpha;
  const double temp = alpha > 0 ? p->kl_temperature : 1;
  double* raw = calloc(live, sizeof(double));
  double* z = calloc(live, sizeof(double));
  double* tz = calloc(live, sizeof(double));
  row_logits(p, &hidden[r * p->dim], raw, z);
  const double lse = log_sum_exp(z, live, 1);
  double mean_z = 0;
  for (int64_t j = 0; j < live; ++j) mean_z += z[j] / (double)live;
  double loss =
      (1 - alpha) * ((1 - eps) * (lse - z[y]) + eps * (lse - mean_z)) + p->z_loss * lse * lse;
  double lse_s = 0, lse_t = 0;
  if (alpha > 0) {
    teacher_logits(p, &p->teacher_hidden[r * p->teacher_dim], tz);
    lse_s = log_sum_exp(z, live, temp);
    lse_t = log_sum_exp(tz, live, temp);
    double kl = 0;
    for (int64_t j = 0; j < live; ++j) {
      const double pt = exp(tz[j] / temp - lse_t);
      kl += pt * ((tz[j] / temp - lse_t) - (z[j] / temp - lse_s));
    }
    loss += alpha * temp * temp * kl;
  }
  for (int64_t j = 0; g && j < live; ++j) {
    const double ps = exp(z[j] - lse);
    double dz =
        (1 - alpha) * (ps - eps / (double)live - (j == y ? 1 - eps : 0)) + 2 * p->z_loss * lse * ps;
    if (alpha > 0) dz += alpha * temp * (exp(z[j] / temp - lse_s) - exp(tz[j] / temp - lse_t));
    const double t = p->cap > 0 ? tanh(raw[j] / p->cap) : 0;
    g[j] = u * dz * (1 - t * t);
  }
  free(raw);
  free(z);
  free(tz);
  *lse_out = lse;
  return loss;
}

double ref_loss_forward(const ref_loss* p, const double* hidden, const int64_t* targets,
                        double* row_loss, double* lse) {
  const int64_t kept = kept_rows(p, targets);
  double total = 0;
  for (int64_t r = 0; r < p->rows; ++r) {
    row_loss[r] = lse[r] = 0;
    if (targets[r] == p->ignore_index) continue;
    row_loss[r] = row_loss_of(p, hidden, r, targets[r], 0, &lse[r], NULL);
    total += row_loss[r];
  }
  return kept ? total / (double)kept : 0;
}

void ref_loss_backward(const ref_loss* p, const double* hidden, const int64_t* targets,
                       double grad_loss, double* d_hidden, double* const* d_weight,
                       double* const* d_bias) {
  const int64_t live = live_ids(p), kept = kept_rows(p, targets);
  double* g = malloc(sizeof(double) * live);
  memset(d_hidden, 0, sizeof(double) * p->rows * p->dim);
  for (int s = 0; s < p->num_segments; ++s) {
    memset(d_weight[s], 0, sizeof(double) * p->segments[s].size * p->dim);
    if (p->segments[s].bias) memset(d_bias[s], 0, sizeof(double) * p->segments[s].size);
  }
  const double u = kept ? grad_loss / (double)kept : 0;
  for (int64_t r = 0; r < p->rows; ++r) {
    if (targets[r] == p->ignore_index) continue;
    double lse;
    row_loss_of(p, hidden, r, targets[r], u, &lse, g);
    const double* e = &hidden[r * p->dim];
    int64_t at = 0;
    for (int s = 0; s < p->num_segments; ++s) {
      const ref_segment* seg = &p->segments[s];
      for (int64_t v = 0; v < seg->size; ++v, ++at) {
        for (int64_t d = 0; d < p->dim; ++d) {
          d_hidden[r * p->dim + d] += g[at] * seg->weight[v * p->dim + d];
          d_weight[s][v * p->dim + d] += g[at] * e[d];
        }
        if (seg->bias) d_bias[s][v] += g[at];
      }
    }
  }
  free(g);
}
