#include "runtime/cpu/CpuLinearCe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compiler/Error.h"
#include "runtime/cpu/HostRows.h"
#include "runtime/cpu/LinearCeProblem.h"
#include "runtime/cpu/LinearCeRowMath.h"
#include "runtime/cpu/RowMath.h"

namespace tilejit {

namespace {

using cpu::f32_at;
using cpu::IdChunk;
using cpu::kIdChunk;
using cpu::kRowChunk;
using cpu::LossProblem;
using cpu::WeightChunk;

// One row chunk of hidden states (and the teacher's) in fp32.
struct HiddenRows {
  int64_t r0 = 0, n = 0;
  std::vector<float> e, et;

  HiddenRows(const LossProblem& p, int64_t chunk)
      : r0(chunk * kRowChunk), n(std::min<int64_t>(kRowChunk, p.rows - chunk * kRowChunk)) {
    e = cpu::load_rows(p.in.hidden, r0, n, p.dim);
    if (p.kl()) et = cpu::load_rows(p.in.teacher_hidden, r0, n, p.teacher_dim);
  }
  const float* row(const LossProblem& p, int64_t r) const { return &e[r * p.dim]; }
  const float* teacher_row(const LossProblem& p, int64_t r) const {
    return p.kl() ? &et[r * p.teacher_dim] : nullptr;
  }
};

// Per-task buffers for one vocabulary chunk.
struct ChunkScratch {
  std::vector<float> raw = std::vector<float>(kIdChunk), z = raw, tz = raw, g = raw,
                     tmp = std::vector<float>(3 * kIdChunk);
};

// The student's modded logits z (raw logits in s.raw) and, with KL, the teacher's tz of one row
// over one chunk. `teacher`: the teacher's chunk (the student's without a teacher layout).
void chunk_logits(const LossRowHooks& hooks, const LossProblem& p, const IdChunk& c,
                  const WeightChunk& w, const WeightChunk& teacher, int64_t row, const float* e,
                  const float* et, ChunkScratch& s) {
  const int n = static_cast<int>(c.n);
  const auto r32 = static_cast<int32_t>(row), id0 = static_cast<int32_t>(c.id0);
  w.logits(e, s.raw.data());
  std::copy_n(s.raw.data(), n, s.z.data());
  const bool mod = !hooks.traits().mod_is_identity;
  if (mod) hooks.logit_row(r32, id0, n, s.z.data());
  if (!p.kl()) return;
  teacher.logits(et, s.tz.data());
  if (mod) hooks.logit_row(r32, id0, n, s.tz.data());
}

float upstream(const LossProblem& p, const CpuLinearCeBackwardArgs& a, int64_t row) {
  switch (p.prog.reduction) {
    case Reduction::None: return f32_at(a.grad_rows, row);
    case Reduction::Sum: return a.grad_loss;
    case Reduction::Mean: return p.kept ? a.grad_loss / static_cast<float>(p.kept) : 0.0f;
  }
  return 0;
}

// The threshold the backward filters at (LinearCeOptions::filter_threshold's rules).
float effective_threshold(const LossRowHooks& hooks, const LossProblem& p, float requested) {
  TILEJIT_USER_CHECK(std::isfinite(requested) && requested < 1,
                     "loss {}: filter_threshold must be finite and < 1, got {}", p.prog.name,
                     requested);
  const cpu::LossTerms k = cpu::LossTerms::of(p.prog);
  // The uniform smoothing term of a skipped chunk is added analytically only when it is the same
  // for every entry, i.e. logit_mod is the identity.
  if (k.eps > 0 && k.alpha < 1 && !hooks.traits().mod_is_identity) return 0;
  if (requested >= 0) return requested;
  switch (p.in.hidden.dtype) {
    case DType::BF16: return 1.0f / 4096;
    case DType::F16: return 1.0f / 32768;
    default: return 0;
  }
}

// The backward of one row over one chunk: the gradient entries in s.g (dL/d raw logit) and
// whether the chunk's products are needed. When they are not (cold), the row's share is the
// uniform term `-uniform` on every entry plus `target_extra` on the target entry.
struct RowChunkGradient {
  bool hot = true;
  int64_t target = -1;  // offset in the chunk, or -1
  float uniform = 0, target_extra = 0;
};

struct Backward {
  const LossRowHooks& hooks;
  const LossProblem& p;
  const CpuLinearCeBackwardArgs& a;
  cpu::LossTerms k;
  float threshold;

  RowChunkGradient row_chunk(const IdChunk& c, const WeightChunk& w, const WeightChunk& teacher,
                             const HiddenRows& h, int64_t r, ChunkScratch& s) const {
    const int64_t row = h.r0 + r;
    const int n = static_cast<int>(c.n);
    chunk_logits(hooks, p, c, w, teacher, row, h.row(p, r), h.teacher_row(p, r), s);
    const cpu::RowGradTerms t = cpu::row_grad_terms(k, upstream(p, a, row), f32_at(a.lse, row),
                                                    p.kl() ? f32_at(a.tempered_lse, row) : 0.0f,
                                                    p.kl() ? f32_at(a.teacher_lse, row) : 0.0f);
    RowChunkGradient out;
    const int64_t target = p.targets[row] - c.id0;
    if (target >= 0 && target < n) out.target = target;
    out.hot = cpu::chunk_gradient(k, t, s.z.data(), s.tz.data(), n, target, threshold, s.g.data());
    if (!hooks.traits().grad_is_one) {
      hooks.logit_grad_row(static_cast<int32_t>(row), static_cast<int32_t>(c.id0), n, s.raw.data(),
                           s.z.data());
      for (int j = 0; j < n; ++j) s.g[j] *= s.z[j];
    }
    // Cold chunks exist only where the uniform term needs no logit_grad (effective_threshold).
    out.uniform = t.uniform;
    if (out.target >= 0) out.target_extra = s.g[out.target] + t.uniform;
    return out;
  }

  bool needs_colsum() const { return threshold > 0 && k.eps > 0 && k.alpha < 1; }
  bool own_teacher() const { return p.own_teacher_layout(); }
};

void check_backward_args(const LossProblem& p, const CpuLinearCeBackwardArgs& a) {
  const LossProgram& prog = p.prog;
  cpu::check_f32_rows(a.lse, p.rows);
  if (p.kl()) {
    cpu::check_kl_rows(p, a.tempered_lse, "tempered_lse");
    cpu::check_kl_rows(p, a.teacher_lse, "teacher_lse");
  }
  if (prog.reduction == Reduction::None) cpu::check_f32_rows(a.grad_rows, p.rows);
  cpu::check_gradient(a.d_hidden, 2, p.rows, p.dim);
  TILEJIT_USER_CHECK(a.d_weights.size() == prog.segments.size(),
                     "loss {}: {} weight gradients for {} segments", prog.name, a.d_weights.size(),
                     prog.segments.size());
  for (size_t s = 0; s < prog.segments.size(); ++s) {
    cpu::check_gradient(a.d_weights[s], 2, prog.segments[s].size(), p.dim);
    if (prog.segments[s].bias.empty()) continue;
    TILEJIT_USER_CHECK(s < a.d_biases.size() && a.d_biases[s].data,
                       "loss {}: segment '{}' has a bias but no bias gradient is given", prog.name,
                       prog.segments[s].name);
    cpu::check_gradient(a.d_biases[s], 1, prog.segments[s].size(), 0);
  }
}

// dE: one task per row chunk, over every id chunk in order. Returns the skipped pairs.
int64_t hidden_gradient(const Backward& b, ThreadPool& pool) {
  const LossProblem& p = b.p;
  std::vector<int64_t> skipped(p.row_chunks(), 0);
  pool.parallel_for(p.row_chunks(), [&](int64_t chunk) {
    HiddenRows h(p, chunk);
    std::vector<float> de(h.e.size(), 0.0f);
    ChunkScratch s;
    WeightChunk w, tw;
    for (const IdChunk& c : p.chunks) {
      w.load_student(p, c, true, b.needs_colsum());
      if (b.own_teacher()) tw.load_teacher(p, c);
      const WeightChunk& teacher = b.own_teacher() ? tw : w;
      for (int64_t r = 0; r < h.n; ++r) {
        if (p.ignored(h.r0 + r)) continue;
        RowChunkGradient g = b.row_chunk(c, w, teacher, h, r, s);
        float* out = &de[r * p.dim];
        const int dim = static_cast<int>(p.dim);
        if (g.hot) {
          cpu::accumulate_rows(s.g.data(), w.rows.data(), static_cast<int>(c.n), dim, out);
          continue;
        }
        ++skipped[chunk];
        if (g.uniform != 0) cpu::axpy(-g.uniform, w.colsum.data(), out, dim);
        if (g.target >= 0) cpu::axpy(g.target_extra, &w.rows[g.target * p.dim], out, dim);
      }
    }
    for (int64_t r = 0; r < h.n; ++r)
      cpu::store_row(b.a.d_hidden, cpu::row_offset(b.a.d_hidden, h.r0 + r), p.dim, &de[r * p.dim]);
  });
  return std::accumulate(skipped.begin(), skipped.end(), int64_t{0});
}

// dC and dbias: one task per id chunk, over every row chunk in order. The rows whose products the
// chunk needs are gathered; the others add the uniform term (the same for every id: summed once)
// and their target entry.
void weight_gradient(const Backward& b, ThreadPool& pool) {
  const LossProblem& p = b.p;
  pool.parallel_for(static_cast<int64_t>(p.chunks.size()), [&](int64_t ci) {
    const IdChunk& c = p.chunks[ci];
    const int n = static_cast<int>(c.n), dim = static_cast<int>(p.dim);
    WeightChunk w, tw;
    w.load_student(p, c, false, false);
    if (b.own_teacher()) tw.load_teacher(p, c);
    const WeightChunk& teacher = b.own_teacher() ? tw : w;
    std::vector<float> dc(static_cast<size_t>(n) * dim, 0.0f), db(n, 0.0f);
    std::vector<float> uniform_rows(dim, 0.0f);  // sum over cold rows of -uniform * E_r
    float uniform_bias = 0;
    bool any_uniform = false;
    ChunkScratch s;
    std::vector<float> gt(static_cast<size_t>(n) * kRowChunk);  // G of the hot rows, [id][row]
    std::vector<float> hot_e(static_cast<size_t>(kRowChunk) * dim);
    for (int64_t chunk = 0; chunk < p.row_chunks(); ++chunk) {
      HiddenRows h(p, chunk);
      int hot = 0;
      for (int64_t r = 0; r < h.n; ++r) {
        if (p.ignored(h.r0 + r)) continue;
        RowChunkGradient g = b.row_chunk(c, w, teacher, h, r, s);
        const float* e = h.row(p, r);
        if (g.hot) {
          for (int j = 0; j < n; ++j) gt[j * kRowChunk + hot] = s.g[j];
          std::copy_n(e, dim, &hot_e[hot * p.dim]);
          ++hot;
          continue;
        }
        if (g.uniform != 0) {
          cpu::axpy(-g.uniform, e, uniform_rows.data(), dim);
          uniform_bias -= g.uniform;
          any_uniform = true;
        }
        if (g.target >= 0) {
          cpu::axpy(g.target_extra, e, &dc[g.target * p.dim], dim);
          db[g.target] += g.target_extra;
        }
      }
      if (hot == 0) continue;
      for (int j = 0; j < n; ++j) {
        const float* gj = &gt[j * kRowChunk];
        for (int r = 0; r < hot; ++r) db[j] += gj[r];
        cpu::accumulate_rows(gj, hot_e.data(), hot, dim, &dc[j * p.dim]);
      }
    }
    if (any_uniform) {
      for (int j = 0; j < n; ++j) {
        cpu::axpy(1.0f, uniform_rows.data(), &dc[j * p.dim], dim);
        db[j] += uniform_bias;
      }
    }
    const TensorView& dw = b.a.d_weights[c.seg];
    for (int j = 0; j < n; ++j)
      cpu::store_row(dw, cpu::row_offset(dw, c.v0 + j), p.dim, &dc[j * p.dim]);
    if (!p.prog.segments[c.seg].bias.empty()) {
      const TensorView& dbv = b.a.d_biases[c.seg];
      for (int j = 0; j < n; ++j) cpu::store_row(dbv, (c.v0 + j) * dbv.strides[0], 1, &db[j]);
    }
  });
}

}  // namespace

double cpu_linear_ce_forward(const LossRowHooks& hooks, const LossProgram& prog,
                             const CpuLinearCeInputs& in, const CpuLinearCeForwardOutputs& out,
                             ThreadPool& pool) {
  LossProblem p = cpu::make_problem(prog, in);
  cpu::check_f32_rows(out.lse, p.rows);
  cpu::check_f32_rows(out.row_loss, p.rows);
  const bool want_target = out.target_logit.data != nullptr;
  if (want_target) cpu::check_f32_rows(out.target_logit, p.rows);
  if (p.kl()) {
    cpu::check_kl_rows(p, out.tempered_lse, "tempered_lse");
    cpu::check_kl_rows(p, out.teacher_lse, "teacher_lse");
  }
  const cpu::LossTerms k = cpu::LossTerms::of(prog);

  pool.parallel_for(p.row_chunks(), [&](int64_t chunk) {
    HiddenRows h(p, chunk);
    std::vector<cpu::LossRowStats> stats(h.n);
    ChunkScratch s;
    WeightChunk w, tw;
    for (const IdChunk& c : p.chunks) {
      w.load_student(p, c, false, false);
      if (p.own_teacher_layout()) tw.load_teacher(p, c);
      const WeightChunk& teacher = p.own_teacher_layout() ? tw : w;
      const int n = static_cast<int>(c.n);
      for (int64_t r = 0; r < h.n; ++r) {
        const int64_t row = h.r0 + r;
        if (p.ignored(row)) continue;
        chunk_logits(hooks, p, c, w, teacher, row, h.row(p, r), h.teacher_row(p, r), s);
        stats[r].add(s.z.data(), n, p.targets[row] - c.id0, s.tmp.data());
        if (p.kl()) stats[r].add_kl(k, s.z.data(), s.tz.data(), n, s.tmp.data());
      }
    }
    for (int64_t r = 0; r < h.n; ++r) {
      const int64_t row = h.r0 + r;
      const cpu::LossRowStats::Result res =
          p.ignored(row) ? cpu::LossRowStats::Result{} : stats[r].finish(k);
      f32_at(out.lse, row) = res.lse;
      f32_at(out.row_loss, row) = res.row_loss;
      if (want_target) f32_at(out.target_logit, row) = res.target_logit;
      if (p.kl()) {
        f32_at(out.tempered_lse, row) = res.tempered_lse;
        f32_at(out.teacher_lse, row) = res.teacher_lse;
      }
    }
  });
  double total = 0;
  for (int64_t r = 0; r < p.rows; ++r) total += f32_at(out.row_loss, r);
  if (prog.reduction == Reduction::Mean) return p.kept ? total / static_cast<double>(p.kept) : 0.0;
  return total;
}

CpuLinearCeBackwardStats cpu_linear_ce_backward(const LossRowHooks& hooks, const LossProgram& prog,
                                                const CpuLinearCeInputs& in,
                                                const CpuLinearCeBackwardArgs& a,
                                                ThreadPool& pool) {
  LossProblem p = cpu::make_problem(prog, in);
  check_backward_args(p, a);
  const Backward b{hooks, p, a, cpu::LossTerms::of(prog),
                   effective_threshold(hooks, p, a.filter_threshold)};
  CpuLinearCeBackwardStats stats;
  stats.filter_threshold = b.threshold;
  stats.pairs = p.kept * static_cast<int64_t>(p.chunks.size());
  stats.skipped = hidden_gradient(b, pool);
  weight_gradient(b, pool);
  return stats;
}

}  // namespace tilejit
