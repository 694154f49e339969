#include "runtime/cpu/LinearCeProblem.h"

#include <algorithm>
#include <limits>

#include "compiler/Error.h"
#include "compiler/Validate.h"
#include "runtime/cpu/HostRows.h"
#include "runtime/cpu/RowMath.h"

namespace tilejit::cpu {

namespace {

constexpr auto kHost = TensorView::Where::Host;

bool has_bias(const std::vector<Segment>& segments, size_t s) { return !segments[s].bias.empty(); }

// A layout's weights [V_s, dim] and biases [V_s] (`what`: "" or "teacher ").
void check_layout(const LossProgram& prog, const std::vector<Segment>& segments,
                  const std::vector<TensorView>& weights, const std::vector<TensorView>& biases,
                  int64_t dim, std::string_view what, const TensorView& hidden) {
  TILEJIT_USER_CHECK(weights.size() == segments.size(),
                     "loss {}: {} {}weight tensors for {} {}segments", prog.name, weights.size(),
                     what, segments.size(), what);
  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& seg = segments[s];
    weights[s]
        .check_well_formed()
        .check_rank(2)
        .check_where(kHost)
        .check_dtype({DType::F32, DType::BF16, DType::F16})
        .check_last_dim_contiguous()
        .check_dim(0, seg.size(), seg.name);
    TILEJIT_USER_CHECK(weights[s].dim(1) == dim,
                       "loss {}: {}weight '{}' of segment '{}' has {} columns but the {}hidden "
                       "states '{}' have {} ({})",
                       prog.name, what, seg.weight, seg.name, weights[s].dim(1), what, hidden.name,
                       dim, weights[s].describe());
    if (!has_bias(segments, s)) continue;
    TILEJIT_USER_CHECK(s < biases.size() && biases[s].data,
                       "loss {}: {}segment '{}' has bias '{}' but none is given", prog.name, what,
                       seg.name, seg.bias);
    biases[s]
        .check_well_formed()
        .check_rank(1)
        .check_where(kHost)
        .check_dtype({DType::F32, DType::BF16, DType::F16})
        .check_dim(0, seg.size(), seg.bias);
  }
}

bool given(const TensorView& t) { return t.data != nullptr || !t.shape.empty(); }

// The teacher's hidden states and layout; returns D_t.
int64_t check_teacher(const LossProgram& prog, const CpuLinearCeInputs& in, int64_t rows,
                      int64_t dim) {
  if (!prog.kl) {
    TILEJIT_USER_CHECK(!given(in.teacher_hidden) && in.teacher_weights.empty(),
                       "loss {}: teacher tensors are given but the program has no kl term",
                       prog.name);
    return 0;
  }
  TILEJIT_USER_CHECK(given(in.teacher_hidden),
                     "loss {}: the kl term needs the teacher's hidden states "
                     "(CpuLinearCeInputs::teacher_hidden, [N, D_t])",
                     prog.name);
  const TensorView& th = in.teacher_hidden;
  th.check_well_formed()
      .check_rank(2)
      .check_where(kHost)
      .check_dtype({DType::F32, DType::BF16, DType::F16})
      .check_last_dim_contiguous()
      .check_dim(0, rows, "rows");
  const int64_t teacher_dim = th.dim(1);
  const std::vector<Segment>& segments = prog.kl->teacher_segments;
  if (segments.empty()) {
    TILEJIT_USER_CHECK(in.teacher_weights.empty(),
                       "loss {}: teacher weights are given but the program has no teacher layout "
                       "(the teacher uses the student's weights)",
                       prog.name);
    TILEJIT_USER_CHECK(teacher_dim == dim,
                       "loss {}: without a teacher layout the teacher uses the student's weights, "
                       "so its hidden states '{}' need D = {} columns, got {} ({})",
                       prog.name, th.name, dim, teacher_dim, th.describe());
    return teacher_dim;
  }
  check_layout(prog, segments, in.teacher_weights, in.teacher_biases, teacher_dim, "teacher ", th);
  return teacher_dim;
}

// The teacher's rows of ids [id0, id0 + n), one run per teacher segment crossed.
std::vector<WeightRun> teacher_runs(const LossProgram& prog, int64_t id0, int64_t n) {
  std::vector<WeightRun> runs;
  int64_t covered = 0;
  const std::vector<Segment>& segments = prog.kl->teacher_segments;
  for (size_t s = 0; s < segments.size(); ++s) {
    int64_t lo = std::max(id0, segments[s].begin), hi = std::min(id0 + n, segments[s].end);
    if (lo >= hi) continue;
    runs.push_back({static_cast<int>(s), lo - segments[s].begin, hi - lo});
    covered += hi - lo;
  }
  TILEJIT_INTERNAL_CHECK(covered == n, "loss {}: teacher layout misses ids of [{}, {})", prog.name,
                         id0, id0 + n);
  return runs;
}

int64_t read_target(const TensorView& t, int64_t row) {
  if (t.dtype == DType::I64) return static_cast<const int64_t*>(t.data)[row * t.strides[0]];
  return static_cast<const int32_t*>(t.data)[row * t.strides[0]];
}

}  // namespace

void check_f32_rows(const TensorView& t, int64_t rows) {
  t.check_well_formed()
      .check_rank(1)
      .check_where(kHost)
      .check_dtype(DType::F32)
      .check_dim(0, rows, "rows");
}

void check_kl_rows(const LossProblem& p, const TensorView& t, std::string_view what) {
  TILEJIT_USER_CHECK(given(t), "loss {}: the kl term needs '{}' (f32 [N]) to save for the backward",
                     p.prog.name, what);
  check_f32_rows(t, p.rows);
}

void check_gradient(const TensorView& t, int rank, int64_t rows, int64_t dim) {
  t.check_well_formed()
      .check_rank(rank)
      .check_where(kHost)
      .check_dtype({DType::F32, DType::BF16, DType::F16})
      .check_dim(0, rows);
  if (rank == 2) t.check_last_dim_contiguous().check_dim(1, dim);
}

LossProblem make_problem(const LossProgram& prog, const CpuLinearCeInputs& in) {
  validate(prog);
  in.hidden.check_well_formed()
      .check_rank(2)
      .check_where(kHost)
      .check_dtype({DType::F32, DType::BF16, DType::F16})
      .check_last_dim_contiguous();
  LossProblem p{.prog = prog, .in = in};
  p.rows = in.hidden.dim(0);
  p.dim = in.hidden.dim(1);
  p.live = prog.live_ids();
  TILEJIT_USER_CHECK(p.rows <= std::numeric_limits<int32_t>::max(),
                     "loss {}: '{}' has {} rows, more than 2^31 - 1", prog.name, in.hidden.name,
                     p.rows);
  in.targets.check_well_formed()
      .check_rank(1)
      .check_where(kHost)
      .check_dtype({DType::I32, DType::I64})
      .check_dim(0, p.rows, "rows");
  check_layout(prog, prog.segments, in.weights, in.biases, p.dim, "", in.hidden);
  p.teacher_dim = check_teacher(prog, in, p.rows, p.dim);

  for (size_t s = 0; s < prog.segments.size(); ++s) {
    const Segment& seg = prog.segments[s];
    for (int64_t v0 = 0; v0 < seg.size(); v0 += kIdChunk) {
      IdChunk c{static_cast<int>(s),
                v0,
                std::min<int64_t>(kIdChunk, seg.size() - v0),
                seg.begin + v0,
                {}};
      if (p.own_teacher_layout()) c.teacher = teacher_runs(prog, c.id0, c.n);
      p.chunks.push_back(std::move(c));
    }
  }
  p.targets.resize(p.rows);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t t = read_target(in.targets, r);
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

void WeightChunk::load_student(const LossProblem& p, const IdChunk& c, bool keep_rows,
                               bool want_colsum) {
  load(p.in.weights, p.in.biases, p.prog.segments, {{c.seg, c.v0, c.n}}, p.dim, keep_rows,
       want_colsum);
}

void WeightChunk::load_teacher(const LossProblem& p, const IdChunk& c) {
  load(p.in.teacher_weights, p.in.teacher_biases, p.prog.kl->teacher_segments, c.teacher,
       p.teacher_dim, false, false);
}

void WeightChunk::load(const std::vector<TensorView>& weights,
                       const std::vector<TensorView>& biases, const std::vector<Segment>& segments,
                       const std::vector<WeightRun>& runs, int64_t d, bool keep_rows,
                       bool want_colsum) {
  dim = d;
  n = 0;
  for (const WeightRun& run : runs) n += run.n;
  rows.resize(static_cast<size_t>(n) * dim);
  t.resize(static_cast<size_t>(kIdChunk) * dim);
  bias.assign(n, 0.0f);
  int64_t j = 0;
  for (const WeightRun& run : runs) {
    const TensorView& w = weights[run.seg];
    for (int64_t v = 0; v < run.n; ++v, ++j) {
      load_row(w, row_offset(w, run.v0 + v), dim, &rows[j * dim]);
      if (has_bias(segments, run.seg))
        bias[j] = load_scalar(biases[run.seg], (run.v0 + v) * biases[run.seg].strides[0]);
    }
  }
  transpose_into(rows.data(), static_cast<int>(n), static_cast<int>(dim), t.data(), kIdChunk);
  colsum.clear();
  if (want_colsum) {
    colsum.assign(dim, 0.0f);
    for (int64_t v = 0; v < n; ++v)
      axpy(1.0f, &rows[v * dim], colsum.data(), static_cast<int>(dim));
  }
  if (!keep_rows) rows.clear();
}

void WeightChunk::logits(const float* e, float* x) const {
  dot_transposed(e, t.data(), static_cast<int>(dim), kIdChunk, static_cast<int>(n), x);
  for (int64_t j = 0; j < n; ++j) x[j] += bias[j];
}

std::vector<float> load_rows(const TensorView& t, int64_t r0, int64_t n, int64_t dim) {
  std::vector<float> e(static_cast<size_t>(n) * dim);
  for (int64_t r = 0; r < n; ++r) load_row(t, row_offset(t, r0 + r), dim, &e[r * dim]);
  return e;
}

}  // namespace tilejit::cpu
