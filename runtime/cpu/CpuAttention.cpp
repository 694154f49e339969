#include "runtime/cpu/CpuAttention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "compiler/Error.h"
#include "runtime/cpu/HostRows.h"
#include "runtime/cpu/RowMath.h"

namespace tilejit {

namespace {

using cpu::dot_transposed;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Problem {
  int batch, heads_q, heads_kv, seq_q, seq_kv, dim, group;
  int block_q, block_kv, q_tiles, kv_tiles;
  float scale;
};

void check_tensor(const TensorView& t, int rank, bool f32_only = false) {
  t.check_well_formed().check_rank(rank).check_where(TensorView::Where::Host);
  if (f32_only)
    t.check_dtype(DType::F32);
  else
    t.check_dtype({DType::F32, DType::BF16, DType::F16}).check_last_dim_contiguous();
}

Problem make_problem(const BlockMask& mask, const TensorView& q, const TensorView& k,
                     const TensorView& v, float scale) {
  check_tensor(q, 4);
  check_tensor(k, 4);
  check_tensor(v, 4);
  Problem p{};
  p.batch = static_cast<int>(q.dim(0));
  p.heads_q = static_cast<int>(q.dim(1));
  p.seq_q = static_cast<int>(q.dim(2));
  p.dim = static_cast<int>(q.dim(3));
  p.heads_kv = static_cast<int>(k.dim(1));
  p.seq_kv = static_cast<int>(k.dim(2));
  k.check_dim(0, p.batch, "batch").check_dim(3, p.dim, "head_dim");
  v.check_dim(0, p.batch, "batch").check_dim(1, p.heads_kv, "heads_kv")
      .check_dim(2, p.seq_kv, "seq_kv").check_dim(3, p.dim, "head_dim");
  TILEJIT_USER_CHECK(p.heads_kv > 0 && p.heads_q % p.heads_kv == 0,
                     "attention: query heads ({}) must be a multiple of kv heads ({})", p.heads_q,
                     p.heads_kv);
  p.group = p.heads_q / p.heads_kv;
  const BlockMaskShape& ms = mask.shape();
  TILEJIT_USER_CHECK(ms.seq_q == p.seq_q && ms.seq_kv == p.seq_kv,
                     "attention: the block mask is for seq_q {} x seq_kv {}, the tensors have {} x {}",
                     ms.seq_q, ms.seq_kv, p.seq_q, p.seq_kv);
  TILEJIT_USER_CHECK(ms.batch == 1 || ms.batch == p.batch,
                     "attention: the block mask has batch {}; expected 1 or {}", ms.batch, p.batch);
  TILEJIT_USER_CHECK(ms.heads == 1 || ms.heads == p.heads_q,
                     "attention: the block mask has {} heads; expected 1 or {} (query heads)",
                     ms.heads, p.heads_q);
  p.block_q = ms.block_q;
  p.block_kv = ms.block_kv;
  p.q_tiles = mask.q_tiles();
  p.kv_tiles = mask.kv_tiles();
  p.scale = scale != 0 ? scale : 1.0f / std::sqrt(static_cast<float>(p.dim));
  return p;
}

void check_like(const TensorView& t, const TensorView& like, int rank, bool f32_only) {
  check_tensor(t, rank, f32_only);
  for (int a = 0; a < rank; ++a) t.check_dim(a, like.dim(a));
}

// The runs listed for (b, h, tile) in the forward (transposed = false) or backward lists.
std::span<const TileRun> runs_of(const BlockMask& m, int b, int h, int tile, bool transposed) {
  int bi = m.shape().batch == 1 ? 0 : b, hi = m.shape().heads == 1 ? 0 : h;
  int tiles = transposed ? m.kv_tiles() : m.q_tiles();
  size_t i = (static_cast<size_t>(bi) * m.shape().heads + hi) * tiles + tile;
  const auto& offsets = transposed ? m.t_offsets() : m.offsets();
  const auto& runs = transposed ? m.t_runs() : m.runs();
  return {runs.data() + offsets[i], runs.data() + offsets[i + 1]};
}

// Rows [s0, s0 + n) of head (b, h) of a [B, H, S, D] tensor as fp32 [n x D], times `scale`.
void load_rows(const TensorView& t, int b, int h, int s0, int n, int dim, float* dst,
               float scale = 1) {
  for (int i = 0; i < n; ++i) {
    float* row = dst + static_cast<int64_t>(i) * dim;
    cpu::load_row(t, cpu::row_offset(t, b, h, s0 + i), dim, row);
    if (scale != 1)
      for (int d = 0; d < dim; ++d) row[d] *= scale;
  }
}

void store_rows(const TensorView& t, int b, int h, int s0, int n, int dim, const float* src) {
  for (int i = 0; i < n; ++i)
    cpu::store_row(t, cpu::row_offset(t, b, h, s0 + i), dim, src + static_cast<int64_t>(i) * dim);
}

float& lse_at(const TensorView& lse, int b, int h, int s) {
  return static_cast<float*>(lse.data)[cpu::row_offset(lse, b, h, s)];
}

// One kv tile of one kv head in fp32: K transposed ([D x block_kv], for row dots), V row-major
// in `rows` (for P V), and when asked K row-major (for dQ) and V transposed (for dP).
struct KvTile {
  int k0 = 0, n = 0;
  std::vector<float> rows, kt, vt, k_rows;

  void load(const Problem& p, const TensorView& k, const TensorView& v, int b, int hk, int kt_index,
            bool keep_k_rows, bool transpose_v) {
    k0 = kt_index * p.block_kv;
    n = std::min(p.block_kv, p.seq_kv - k0);
    size_t tile = static_cast<size_t>(p.block_kv) * p.dim;
    rows.resize(tile);
    kt.resize(tile);
    load_rows(k, b, hk, k0, n, p.dim, rows.data());
    cpu::transpose_into(rows.data(), n, p.dim, kt.data(), p.block_kv);
    if (keep_k_rows) k_rows = rows;
    load_rows(v, b, hk, k0, n, p.dim, rows.data());  // rows now hold V
    if (transpose_v) {
      vt.resize(tile);
      cpu::transpose_into(rows.data(), n, p.dim, vt.data(), p.block_kv);
    }
  }
};

// Scores of one query row against a kv tile, hooks applied (-inf where masked).
void score_row(const AttentionRowHooks& hooks, const Problem& p, const KvTile& t, bool partial,
               int b, int h, int q, const float* q_row, float* s) {
  dot_transposed(q_row, t.kt.data(), p.dim, p.block_kv, t.n, s);
  const HookTraits& tr = hooks.traits();
  bool check = partial && !tr.mask_is_true;
  if (check || !tr.mod_is_identity) hooks.apply_score_row(b, h, q, t.k0, t.n, s, check);
}

void forward_task(const AttentionRowHooks& hooks, const BlockMask& mask, const Problem& p,
                  const CpuAttentionForwardArgs& a, int64_t task) {
  const int qt = static_cast<int>(task % p.q_tiles);
  const int h = static_cast<int>(task / p.q_tiles % p.heads_q);
  const int b = static_cast<int>(task / p.q_tiles / p.heads_q);
  const int hk = h / p.group, q0 = qt * p.block_q, nq = std::min(p.block_q, p.seq_q - q0);
  const int dim = p.dim;
  std::vector<float> q(static_cast<size_t>(nq) * dim), acc(q.size(), 0.0f), m(nq, kNegInf),
      l(nq, 0.0f), s(p.block_kv);
  load_rows(a.q, b, h, q0, nq, dim, q.data(), p.scale);
  KvTile tile;
  for (const TileRun& run : runs_of(mask, b, h, qt, false)) {
    for (int kt = run.first; kt < run.first + run.count(); ++kt) {
      tile.load(p, a.k, a.v, b, hk, kt, false, false);
      for (int i = 0; i < nq; ++i) {
        score_row(hooks, p, tile, !run.full(), b, h, q0 + i, &q[static_cast<size_t>(i) * dim], s.data());
        float mx = kNegInf;
        for (int j = 0; j < tile.n; ++j) mx = std::max(mx, s[j]);
        if (mx == kNegInf) continue;
        float m_new = std::max(m[i], mx);
        float alpha = cpu::softmax_exp(m[i] - m_new);
        float* o = &acc[static_cast<size_t>(i) * dim];
        if (alpha != 1.0f) {
          for (int d = 0; d < dim; ++d) o[d] *= alpha;
          l[i] *= alpha;
        }
        l[i] += cpu::exp_shifted(s.data(), tile.n, m_new);
        cpu::accumulate_rows(s.data(), tile.rows.data(), tile.n, dim, o);
        m[i] = m_new;
      }
    }
  }
  for (int i = 0; i < nq; ++i) {
    float* o = &acc[static_cast<size_t>(i) * dim];
    bool live = m[i] != kNegInf && l[i] > 0;
    float inv = live ? 1.0f / l[i] : 0.0f;
    for (int d = 0; d < dim; ++d) o[d] = live ? o[d] * inv : 0.0f;
    lse_at(a.lse, b, h, q0 + i) = live ? m[i] + std::log(l[i]) : kNegInf;
  }
  store_rows(a.out, b, h, q0, nq, dim, acc.data());
}

// ---- backward ----

struct BackwardRow {
  std::vector<float> raw, p, ds, grad;
  explicit BackwardRow(int n) : raw(n), p(n), ds(n), grad(n) {}
};

// P and dS (gradient w.r.t. the raw scaled score) of one query row against a kv tile.
// Returns false for an all-masked row (lse = -inf), which contributes nothing.
bool backward_row(const AttentionRowHooks& hooks, const Problem& p, const KvTile& t, bool partial,
                  int b, int h, int q, const float* q_row, const float* do_row, float lse,
                  float delta, BackwardRow& r) {
  if (lse == kNegInf) return false;
  const HookTraits& tr = hooks.traits();
  dot_transposed(q_row, t.kt.data(), p.dim, p.block_kv, t.n, r.raw.data());
  std::copy_n(r.raw.begin(), t.n, r.p.begin());
  bool check = partial && !tr.mask_is_true;
  if (check || !tr.mod_is_identity) hooks.apply_score_row(b, h, q, t.k0, t.n, r.p.data(), check);
  if (!tr.grad_is_one) {
    std::copy_n(r.p.begin(), t.n, r.grad.begin());
    hooks.score_grad_row(b, h, q, t.k0, t.n, r.raw.data(), r.grad.data());
  }
  cpu::exp_shifted(r.p.data(), t.n, lse);
  dot_transposed(do_row, t.vt.data(), p.dim, p.block_kv, t.n, r.ds.data());
  for (int j = 0; j < t.n; ++j) r.ds[j] = r.p[j] * (r.ds[j] - delta);
  if (!tr.grad_is_one)
    for (int j = 0; j < t.n; ++j) r.ds[j] *= r.grad[j];
  return true;
}

// delta[(b * Hq + h) * Sq + i] = <dO_i, O_i>.
std::vector<float> row_deltas(const Problem& p, const CpuAttentionBackwardArgs& a, ThreadPool& pool) {
  std::vector<float> delta(static_cast<size_t>(p.batch) * p.heads_q * p.seq_q);
  pool.parallel_for(static_cast<int64_t>(p.batch) * p.heads_q, [&](int64_t bh) {
    int b = static_cast<int>(bh / p.heads_q), h = static_cast<int>(bh % p.heads_q);
    std::vector<float> o(p.dim), g(p.dim);
    for (int i = 0; i < p.seq_q; ++i) {
      cpu::load_row(a.out, cpu::row_offset(a.out, b, h, i), p.dim, o.data());
      cpu::load_row(a.d_out, cpu::row_offset(a.d_out, b, h, i), p.dim, g.data());
      float sum = 0;
      for (int d = 0; d < p.dim; ++d) sum += o[d] * g[d];
      delta[static_cast<size_t>(bh) * p.seq_q + i] = sum;
    }
  });
  return delta;
}

void dq_task(const AttentionRowHooks& hooks, const BlockMask& mask, const Problem& p,
             const CpuAttentionBackwardArgs& a, const std::vector<float>& delta, int64_t task) {
  const int qt = static_cast<int>(task % p.q_tiles);
  const int h = static_cast<int>(task / p.q_tiles % p.heads_q);
  const int b = static_cast<int>(task / p.q_tiles / p.heads_q);
  const int hk = h / p.group, q0 = qt * p.block_q, nq = std::min(p.block_q, p.seq_q - q0);
  const int dim = p.dim;
  std::vector<float> q(static_cast<size_t>(nq) * dim), g(q.size()), dq(q.size(), 0.0f);
  load_rows(a.q, b, h, q0, nq, dim, q.data(), p.scale);
  load_rows(a.d_out, b, h, q0, nq, dim, g.data());
  const size_t row0 = (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q + q0;
  KvTile tile;
  BackwardRow r(p.block_kv);
  for (const TileRun& run : runs_of(mask, b, h, qt, false)) {
    for (int kt = run.first; kt < run.first + run.count(); ++kt) {
      tile.load(p, a.k, a.v, b, hk, kt, true, true);
      for (int i = 0; i < nq; ++i) {
        size_t at = static_cast<size_t>(i) * dim;
        if (!backward_row(hooks, p, tile, !run.full(), b, h, q0 + i, &q[at], &g[at],
                          lse_at(a.lse, b, h, q0 + i), delta[row0 + i], r))
          continue;
        cpu::accumulate_rows(r.ds.data(), tile.k_rows.data(), tile.n, dim, &dq[at]);
      }
    }
  }
  for (float& x : dq) x *= p.scale;
  store_rows(a.d_q, b, h, q0, nq, dim, dq.data());
}

void dkv_task(const AttentionRowHooks& hooks, const BlockMask& mask, const Problem& p,
              const CpuAttentionBackwardArgs& a, const std::vector<float>& delta, int64_t task) {
  const int kt = static_cast<int>(task % p.kv_tiles);
  const int hk = static_cast<int>(task / p.kv_tiles % p.heads_kv);
  const int b = static_cast<int>(task / p.kv_tiles / p.heads_kv);
  const int dim = p.dim;
  KvTile tile;
  tile.load(p, a.k, a.v, b, hk, kt, false, true);
  std::vector<float> dk(static_cast<size_t>(tile.n) * dim, 0.0f), dv(dk.size(), 0.0f);
  std::vector<float> q(static_cast<size_t>(p.block_q) * dim), g(q.size());
  // P and dS of one q tile, transposed ([kv][q]), so dV and dK are weighted sums of rows.
  std::vector<float> pt(static_cast<size_t>(p.block_kv) * p.block_q),
      dst(static_cast<size_t>(p.block_kv) * p.block_q);
  BackwardRow r(p.block_kv);
  for (int h = hk * p.group; h < (hk + 1) * p.group; ++h) {  // GQA: the group, in order
    const size_t row0 = (static_cast<size_t>(b) * p.heads_q + h) * p.seq_q;
    for (const TileRun& run : runs_of(mask, b, h, kt, true)) {
      for (int qt = run.first; qt < run.first + run.count(); ++qt) {
        const int q0 = qt * p.block_q, nq = std::min(p.block_q, p.seq_q - q0);
        load_rows(a.q, b, h, q0, nq, dim, q.data(), p.scale);
        load_rows(a.d_out, b, h, q0, nq, dim, g.data());
        for (int i = 0; i < nq; ++i) {
          size_t at = static_cast<size_t>(i) * dim;
          bool live = backward_row(hooks, p, tile, !run.full(), b, h, q0 + i, &q[at], &g[at],
                                   lse_at(a.lse, b, h, q0 + i), delta[row0 + q0 + i], r);
          for (int j = 0; j < tile.n; ++j) {
            pt[static_cast<size_t>(j) * p.block_q + i] = live ? r.p[j] : 0.0f;
            dst[static_cast<size_t>(j) * p.block_q + i] = live ? r.ds[j] : 0.0f;
          }
        }
        for (int j = 0; j < tile.n; ++j) {
          size_t jd = static_cast<size_t>(j) * dim, jq = static_cast<size_t>(j) * p.block_q;
          cpu::accumulate_rows(&pt[jq], g.data(), nq, dim, &dv[jd]);
          cpu::accumulate_rows(&dst[jq], q.data(), nq, dim, &dk[jd]);  // q is pre-scaled
        }
      }
    }
  }
  store_rows(a.d_k, b, hk, tile.k0, tile.n, dim, dk.data());
  store_rows(a.d_v, b, hk, tile.k0, tile.n, dim, dv.data());
}

}  // namespace

void cpu_attention_forward(const AttentionRowHooks& hooks, const BlockMask& mask,
                           const CpuAttentionForwardArgs& a, ThreadPool& pool) {
  Problem p = make_problem(mask, a.q, a.k, a.v, a.scale);
  check_like(a.out, a.q, 4, false);
  check_tensor(a.lse, 3, true);
  for (int ax = 0; ax < 3; ++ax) a.lse.check_dim(ax, a.q.dim(ax));
  pool.parallel_for(static_cast<int64_t>(p.batch) * p.heads_q * p.q_tiles,
                    [&](int64_t t) { forward_task(hooks, mask, p, a, t); });
}

void cpu_attention_backward(const AttentionRowHooks& hooks, const BlockMask& mask,
                            const CpuAttentionBackwardArgs& a, ThreadPool& pool) {
  Problem p = make_problem(mask, a.q, a.k, a.v, a.scale);
  check_like(a.out, a.q, 4, false);
  check_like(a.d_out, a.q, 4, false);
  check_like(a.d_q, a.q, 4, false);
  check_like(a.d_k, a.k, 4, false);
  check_like(a.d_v, a.k, 4, false);
  check_tensor(a.lse, 3, true);
  for (int ax = 0; ax < 3; ++ax) a.lse.check_dim(ax, a.q.dim(ax));
  std::vector<float> delta = row_deltas(p, a, pool);
  pool.parallel_for(static_cast<int64_t>(p.batch) * p.heads_q * p.q_tiles,
                    [&](int64_t t) { dq_task(hooks, mask, p, a, delta, t); });
  pool.parallel_for(static_cast<int64_t>(p.batch) * p.heads_kv * p.kv_tiles,
                    [&](int64_t t) { dkv_task(hooks, mask, p, a, delta, t); });
}

}  // namespace tilejit
