#include "runtime/cpu/CpuLinearCe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "compiler/Error.h"
#include "runtime/cpu/HostRows.h"
#include "runtime/cpu/RowMath.h"

namespace tilejit {

namespace {

using cpu::softmax_exp;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kRowChunk = 32;
constexpr int kIdChunk = 256;

// A run of ids inside one segment.
struct IdChunk {
  int seg;
  int64_t v0, n;  // rows [v0, v0 + n) of the segment's weight
  int64_t id0;    // global id of row v0
};

struct Problem {
  const LossProgram& prog;
  const CpuLinearCeInputs& in;
  int64_t rows, dim, live;
  std::vector<IdChunk> chunks;
  std::vector<int32_t> targets;  // copied once
  int64_t kept = 0;
};

bool has_bias(const LossProgram& p, size_t s) { return !p.segments[s].bias.empty(); }

Problem make_problem(const LossProgram& prog, const CpuLinearCeInputs& in) {
  TILEJIT_USER_CHECK(!prog.kl, "loss {}: the KL term is not supported by the CPU executor",
                     prog.name);
  auto host = TensorView::Where::Host;
  in.hidden.check_well_formed().check_rank(2).check_where(host)
      .check_dtype({DType::F32, DType::BF16, DType::F16}).check_last_dim_contiguous();
  Problem p{prog, in, in.hidden.dim(0), in.hidden.dim(1), prog.live_ids(), {}, {}, 0};
  in.targets.check_well_formed().check_rank(1).check_where(host).check_dtype(DType::I32)
      .check_dim(0, p.rows, "rows");
  TILEJIT_USER_CHECK(in.weights.size() == prog.segments.size(),
                     "loss {}: {} weight tensors for {} segments", prog.name, in.weights.size(),
                     prog.segments.size());
  for (size_t s = 0; s < prog.segments.size(); ++s) {
    const Segment& seg = prog.segments[s];
    in.weights[s].check_well_formed().check_rank(2).check_where(host)
        .check_dtype({DType::F32, DType::BF16, DType::F16}).check_last_dim_contiguous()
        .check_dim(0, seg.size(), seg.name).check_dim(1, p.dim, "dim");
    if (has_bias(prog, s)) {
      TILEJIT_USER_CHECK(s < in.biases.size() && in.biases[s].data,
                         "loss {}: segment '{}' has bias '{}' but none is given", prog.name,
                         seg.name, seg.bias);
      in.biases[s].check_well_formed().check_rank(1).check_where(host)
          .check_dtype({DType::F32, DType::BF16, DType::F16}).check_dim(0, seg.size(), seg.bias);
    }
    for (int64_t v0 = 0; v0 < seg.size(); v0 += kIdChunk)
      p.chunks.push_back({static_cast<int>(s), v0, std::min<int64_t>(kIdChunk, seg.size() - v0),
                          seg.begin + v0});
  }
  p.targets.resize(p.rows);
  for (int64_t r = 0; r < p.rows; ++r) {
    int32_t t = static_cast<int32_t*>(in.targets.data)[r * in.targets.strides[0]];
    p.targets[r] = t;
    if (t == prog.ignore_index) continue;
    bool live = false;
    for (const Segment& seg : prog.segments) live |= t >= seg.begin && t < seg.end;
    TILEJIT_USER_CHECK(live, "loss {}: target {} of row {} is not a live id (nor ignore_index {})",
                       prog.name, t, r, prog.ignore_index);
    ++p.kept;
  }
  return p;
}

// One id chunk of the weights in fp32: transposed [D x kIdChunk] for logits, optionally
// row-major [n x D] for dE, and the bias.
struct WeightChunk {
  const IdChunk* c = nullptr;
  std::vector<float> rows, t, bias;

  void load(const Problem& p, const IdChunk& chunk, bool keep_rows) {
    c = &chunk;
    const TensorView& w = p.in.weights[chunk.seg];
    rows.resize(static_cast<size_t>(chunk.n) * p.dim);
    t.resize(static_cast<size_t>(kIdChunk) * p.dim);
    for (int64_t v = 0; v < chunk.n; ++v)
      cpu::load_row(w, cpu::row_offset(w, chunk.v0 + v), p.dim, &rows[v * p.dim]);
    cpu::transpose_into(rows.data(), static_cast<int>(chunk.n), static_cast<int>(p.dim), t.data(), kIdChunk);
    if (!keep_rows) rows.clear();
    bias.assign(chunk.n, 0.0f);
    if (has_bias(p.prog, chunk.seg)) {
      const TensorView& b = p.in.biases[chunk.seg];
      for (int64_t v = 0; v < chunk.n; ++v)
        bias[v] = cpu::load_scalar(b, (chunk.v0 + v) * b.strides[0]);
    }
  }

  // Raw logits of one row of E.
  void logits(const Problem& p, const float* e, float* x) const {
    cpu::dot_transposed(e, t.data(), static_cast<int>(p.dim), kIdChunk, static_cast<int>(c->n), x);
    for (int64_t j = 0; j < c->n; ++j) x[j] += bias[j];
  }
};

// Rows [r0, r0 + n) of E in fp32.
std::vector<float> load_hidden(const Problem& p, int64_t r0, int64_t n) {
  std::vector<float> e(static_cast<size_t>(n) * p.dim);
  for (int64_t r = 0; r < n; ++r)
    cpu::load_row(p.in.hidden, cpu::row_offset(p.in.hidden, r0 + r), p.dim, &e[r * p.dim]);
  return e;
}

float& f32_at(const TensorView& t, int64_t i) { return static_cast<float*>(t.data)[i * t.strides[0]]; }

int64_t row_chunks(const Problem& p) { return (p.rows + kRowChunk - 1) / kRowChunk; }

// dL/d(raw logit) of one row over one chunk, times the upstream gradient u.
void row_gradient(const LossRowHooks& hooks, const Problem& p, const WeightChunk& w, int64_t row,
                  const float* e, float lse, float u, float* raw, float* z, float* g) {
  const IdChunk& c = *w.c;
  const int n = static_cast<int>(c.n);
  w.logits(p, e, raw);
  const HookTraits& tr = hooks.traits();
  std::copy_n(raw, n, z);
  if (!tr.mod_is_identity) hooks.logit_row(static_cast<int32_t>(row), static_cast<int32_t>(c.id0), n, z);
  const float eps = static_cast<float>(p.prog.label_smoothing);
  const float zl = 1.0f + 2.0f * static_cast<float>(p.prog.z_loss) * lse;
  const float uniform = eps / static_cast<float>(p.live);
  for (int j = 0; j < n; ++j) g[j] = u * (softmax_exp(z[j] - lse) * zl - uniform);
  int64_t t = p.targets[row] - c.id0;
  if (t >= 0 && t < n) g[t] -= u * (1.0f - eps);
  if (!tr.grad_is_one) {
    hooks.logit_grad_row(static_cast<int32_t>(row), static_cast<int32_t>(c.id0), n, raw, z);
    for (int j = 0; j < n; ++j) g[j] *= z[j];
  }
}

float upstream(const Problem& p, const CpuLinearCeBackwardArgs& a, int64_t row) {
  switch (p.prog.reduction) {
    case Reduction::None: return f32_at(a.grad_rows, row);
    case Reduction::Sum: return a.grad_loss;
    case Reduction::Mean: return p.kept ? a.grad_loss / static_cast<float>(p.kept) : 0.0f;
  }
  return 0;
}

void check_f32_rows(const TensorView& t, int64_t rows) {
  t.check_well_formed().check_rank(1).check_where(TensorView::Where::Host).check_dtype(DType::F32)
      .check_dim(0, rows, "rows");
}

}  // namespace

double cpu_linear_ce_forward(const LossRowHooks& hooks, const LossProgram& prog,
                             const CpuLinearCeInputs& in, const CpuLinearCeForwardOutputs& out,
                             ThreadPool& pool) {
  Problem p = make_problem(prog, in);
  check_f32_rows(out.lse, p.rows);
  check_f32_rows(out.row_loss, p.rows);
  bool want_target = out.target_logit.data != nullptr;
  if (want_target) check_f32_rows(out.target_logit, p.rows);
  const float eps = static_cast<float>(prog.label_smoothing);
  const float lambda = static_cast<float>(prog.z_loss);

  pool.parallel_for(row_chunks(p), [&](int64_t chunk) {
    const int64_t r0 = chunk * kRowChunk, nr = std::min<int64_t>(kRowChunk, p.rows - r0);
    std::vector<float> e = load_hidden(p, r0, nr);
    std::vector<float> m(nr, kNegInf), l(nr, 0.0f), zt(nr, 0.0f), x(kIdChunk);
    std::vector<double> zsum(nr, 0.0);
    WeightChunk w;
    for (const IdChunk& c : p.chunks) {
      w.load(p, c, false);
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t row = r0 + r;
        if (p.targets[row] == prog.ignore_index) continue;
        w.logits(p, &e[r * p.dim], x.data());
        if (!hooks.traits().mod_is_identity)
          hooks.logit_row(static_cast<int32_t>(row), static_cast<int32_t>(c.id0), static_cast<int32_t>(c.n), x.data());
        float mx = kNegInf, sum = 0;
        double zs = 0;
        for (int64_t j = 0; j < c.n; ++j) {
          mx = std::max(mx, x[j]);
          zs += x[j];
        }
        int64_t t = p.targets[row] - c.id0;
        if (t >= 0 && t < c.n) zt[r] = x[t];
        float m_new = std::max(m[r], mx);
        if (m_new == kNegInf) continue;
        sum = cpu::exp_shifted(x.data(), static_cast<int>(c.n), m_new);
        l[r] = l[r] * softmax_exp(m[r] - m_new) + sum;
        m[r] = m_new;
        zsum[r] += zs;
      }
    }
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t row = r0 + r;
      float lse = 0, loss = 0;
      if (p.targets[row] != prog.ignore_index) {
        lse = m[r] + std::log(l[r]);
        loss = (1 - eps) * (lse - zt[r]) +
               eps * (lse - static_cast<float>(zsum[r] / static_cast<double>(p.live))) +
               lambda * lse * lse;
      }
      f32_at(out.lse, row) = lse;
      f32_at(out.row_loss, row) = loss;
      if (want_target) f32_at(out.target_logit, row) = p.targets[row] == prog.ignore_index ? 0.0f : zt[r];
    }
  });
  double total = 0;
  for (int64_t r = 0; r < p.rows; ++r) total += f32_at(out.row_loss, r);
  if (prog.reduction == Reduction::Mean) return p.kept ? total / static_cast<double>(p.kept) : 0.0;
  return total;
}

void cpu_linear_ce_backward(const LossRowHooks& hooks, const LossProgram& prog,
                            const CpuLinearCeInputs& in, const CpuLinearCeBackwardArgs& a,
                            ThreadPool& pool) {
  Problem p = make_problem(prog, in);
  check_f32_rows(a.lse, p.rows);
  if (prog.reduction == Reduction::None) check_f32_rows(a.grad_rows, p.rows);
  a.d_hidden.check_well_formed().check_rank(2).check_where(TensorView::Where::Host)
      .check_dtype({DType::F32, DType::BF16, DType::F16}).check_last_dim_contiguous()
      .check_dim(0, p.rows).check_dim(1, p.dim);
  TILEJIT_USER_CHECK(a.d_weights.size() == prog.segments.size(),
                     "loss {}: {} weight gradients for {} segments", prog.name, a.d_weights.size(),
                     prog.segments.size());
  for (size_t s = 0; s < prog.segments.size(); ++s) {
    a.d_weights[s].check_well_formed().check_rank(2).check_where(TensorView::Where::Host)
        .check_dtype({DType::F32, DType::BF16, DType::F16}).check_last_dim_contiguous()
        .check_dim(0, prog.segments[s].size()).check_dim(1, p.dim);
    if (has_bias(prog, s)) {
      TILEJIT_USER_CHECK(s < a.d_biases.size() && a.d_biases[s].data,
                         "loss {}: segment '{}' has a bias but no bias gradient is given",
                         prog.name, prog.segments[s].name);
      a.d_biases[s].check_well_formed().check_rank(1).check_where(TensorView::Where::Host)
          .check_dtype({DType::F32, DType::BF16, DType::F16}).check_dim(0, prog.segments[s].size());
    }
  }

  // dE: one task per row chunk, over every id chunk in order.
  pool.parallel_for(row_chunks(p), [&](int64_t chunk) {
    const int64_t r0 = chunk * kRowChunk, nr = std::min<int64_t>(kRowChunk, p.rows - r0);
    std::vector<float> e = load_hidden(p, r0, nr), de(e.size(), 0.0f);
    std::vector<float> raw(kIdChunk), z(kIdChunk), g(kIdChunk);
    WeightChunk w;
    for (const IdChunk& c : p.chunks) {
      w.load(p, c, true);
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t row = r0 + r;
        if (p.targets[row] == prog.ignore_index) continue;
        row_gradient(hooks, p, w, row, &e[r * p.dim], f32_at(a.lse, row), upstream(p, a, row),
                     raw.data(), z.data(), g.data());
        cpu::accumulate_rows(g.data(), w.rows.data(), static_cast<int>(c.n), static_cast<int>(p.dim), &de[r * p.dim]);
      }
    }
    for (int64_t r = 0; r < nr; ++r)
      cpu::store_row(a.d_hidden, cpu::row_offset(a.d_hidden, r0 + r), p.dim, &de[r * p.dim]);
  });

  // dC and dbias: one task per id chunk, over every row chunk in order.
  pool.parallel_for(static_cast<int64_t>(p.chunks.size()), [&](int64_t ci) {
    const IdChunk& c = p.chunks[ci];
    WeightChunk w;
    w.load(p, c, false);
    std::vector<float> dc(static_cast<size_t>(c.n) * p.dim, 0.0f), db(c.n, 0.0f);
    std::vector<float> raw(kIdChunk), z(kIdChunk), g(kIdChunk);
    std::vector<float> gt(static_cast<size_t>(c.n) * kRowChunk);  // G of a row chunk, [id][row]
    for (int64_t r0 = 0; r0 < p.rows; r0 += kRowChunk) {
      const int64_t nr = std::min<int64_t>(kRowChunk, p.rows - r0);
      std::vector<float> e = load_hidden(p, r0, nr);
      std::fill(gt.begin(), gt.end(), 0.0f);
      for (int64_t r = 0; r < nr; ++r) {
        const int64_t row = r0 + r;
        if (p.targets[row] == prog.ignore_index) continue;
        row_gradient(hooks, p, w, row, &e[r * p.dim], f32_at(a.lse, row), upstream(p, a, row),
                     raw.data(), z.data(), g.data());
        for (int64_t j = 0; j < c.n; ++j) gt[j * kRowChunk + r] = g[j];
      }
      for (int64_t j = 0; j < c.n; ++j) {
        const float* gj = &gt[j * kRowChunk];
        for (int64_t r = 0; r < nr; ++r) db[j] += gj[r];
        cpu::accumulate_rows(gj, e.data(), static_cast<int>(nr), static_cast<int>(p.dim), &dc[j * p.dim]);
      }
    }
    const TensorView& dw = a.d_weights[c.seg];
    for (int64_t j = 0; j < c.n; ++j)
      cpu::store_row(dw, cpu::row_offset(dw, c.v0 + j), p.dim, &dc[j * p.dim]);
    if (has_bias(prog, c.seg)) {
      const TensorView& dbv = a.d_biases[c.seg];
      for (int64_t j = 0; j < c.n; ++j) cpu::store_row(dbv, (c.v0 + j) * dbv.strides[0], 1, &db[j]);
    }
  });
}

}  // namespace tilejit
