#include "tests/cpu/LinearCeCase.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "dsl/TextForm.h"
#include "tests/cpu/CpuTestSupport.h"
#include "tests/support/LinearCeReference.h"

namespace tilejit::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> doubles(const HostTensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.storage_elems(); ++i) v.push_back(t.get(i));
  return v;
}
std::vector<float> floats(const HostTensor& t) {
  std::vector<float> v;
  for (int64_t i = 0; i < t.storage_elems(); ++i) v.push_back(static_cast<float>(t.get(i)));
  return v;
}

// max |got - want| / (atol + rtol |want| + slack) (<= 1 passes); NaN anywhere fails.
double error_with_slack(const std::vector<double>& got, const std::vector<double>& want,
                        const std::vector<double>& slack, double atol, double rtol) {
  if (slack.empty()) return scaled_error(got, want, atol, rtol);
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::fabs(got[i] - want[i]) / (atol + rtol * std::fabs(want[i]) + slack[i]);
    if (std::isnan(e)) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, e);
  }
  return worst;
}

// A layout's weights and biases: random values in the case's dtype, and their fp32 copies for the
// reference.
struct LayoutTensors {
  std::vector<HostTensor> weights, biases;
  std::vector<std::vector<float>> w, b;

  LayoutTensors(const std::vector<Segment>& segments, DType dtype, int64_t dim,
                std::mt19937_64& rng) {
    for (const Segment& s : segments) {
      weights.push_back(HostTensor::make(dtype, {s.size(), dim}, s.weight));
      fill_random(weights.back(), rng, 0.8);
      biases.push_back(HostTensor::make(DType::F32, {s.size()}, s.bias));
      fill_random(biases.back(), rng, s.bias.empty() ? 0.0 : 0.5);
      w.push_back(floats(weights.back()));
      b.push_back(floats(biases.back()));
    }
  }
  std::vector<TensorView> views(const std::vector<HostTensor>& ts) const {
    std::vector<TensorView> v;
    for (const HostTensor& t : ts) v.push_back(t.view);
    return v;
  }
  std::vector<RefSegment> reference(const std::vector<Segment>& segments) const {
    std::vector<RefSegment> out;
    for (size_t s = 0; s < segments.size(); ++s)
      out.push_back({segments[s].begin, segments[s].size(), w[s].data(),
                     segments[s].bias.empty() ? nullptr : b[s].data()});
    return out;
  }
};

HostTensor poisoned(DType dtype, std::vector<int64_t> shape, std::string name) {
  HostTensor t = HostTensor::make(dtype, std::move(shape), std::move(name));
  t.fill(kNaN);
  return t;
}

}  // namespace

CpuLinearCeBackwardStats check_linear_ce_case(const std::string& text, const LinearCeCase& c) {
  LoweredLoss lowered = lower(parse_loss(text));
  const LossProgram& prog = lowered.program;
  const bool kl = prog.kl.has_value();
  const bool own_teacher = kl && !prog.kl->teacher_segments.empty();
  const int64_t teacher_dim = own_teacher && c.teacher_dim > 0 ? c.teacher_dim : c.dim;
  SCOPED_TRACE(fmt::format("loss {} dtype {} targets {} seed {}", prog.name, dtype_name(c.dtype),
                           dtype_name(c.target_dtype), c.seed));
  std::mt19937_64 rng(c.seed);
  BoundValues bound =
      bind_random(prog.buffers, prog.params, {{"N", c.rows}, {"V", prog.vocab_end()}}, rng);
  auto hooks = make_row_hooks(lowered, bound.bindings);

  HostTensor hidden = HostTensor::make(c.dtype, {c.rows, c.dim}, "hidden");
  fill_random(hidden, rng, c.hidden_amplitude);
  HostTensor teacher_hidden = HostTensor::make(c.dtype, {c.rows, teacher_dim}, "teacher_hidden");
  fill_random(teacher_hidden, rng, c.hidden_amplitude);
  HostTensor targets = HostTensor::make(c.target_dtype, {c.rows}, "targets");
  std::vector<int64_t> live;
  for (const Segment& s : prog.segments)
    for (int64_t id = s.begin; id < s.end; ++id) live.push_back(id);
  for (int64_t r = 0; r < c.rows; ++r) {
    bool ignore = std::uniform_real_distribution<double>(0, 1)(rng) < c.ignored_fraction;
    targets.set(r, static_cast<double>(ignore ? prog.ignore_index : live[rng() % live.size()]));
  }
  LayoutTensors student(prog.segments, c.dtype, c.dim, rng);
  static const std::vector<Segment> kNoSegments;
  const std::vector<Segment>& teacher_segments =
      own_teacher ? prog.kl->teacher_segments : kNoSegments;
  LayoutTensors teacher(teacher_segments, c.dtype, teacher_dim, rng);

  CpuLinearCeInputs in{.hidden = hidden.view,
                       .targets = targets.view,
                       .weights = student.views(student.weights),
                       .biases = student.views(student.biases)};
  if (kl) {
    in.teacher_hidden = teacher_hidden.view;
    in.teacher_weights = teacher.views(teacher.weights);
    in.teacher_biases = teacher.views(teacher.biases);
  }
  HostTensor lse = poisoned(DType::F32, {c.rows}, "lse"),
             row_loss = poisoned(DType::F32, {c.rows}, "row_loss"),
             target = poisoned(DType::F32, {c.rows}, "target_logit"),
             tempered_lse = poisoned(DType::F32, {c.rows}, "tempered_lse"),
             teacher_lse = poisoned(DType::F32, {c.rows}, "teacher_lse");
  const double loss = cpu_linear_ce_forward(
      *hooks, prog, in,
      {lse.view, row_loss.view, target.view, tempered_lse.view, teacher_lse.view});

  std::vector<float> upstream(c.rows);
  for (float& u : upstream) u = std::uniform_real_distribution<float>(-1, 1)(rng);
  if (prog.reduction != Reduction::None) upstream.assign(1, c.grad_loss);
  HostTensor d_hidden = poisoned(c.dtype, {c.rows, c.dim}, "d_hidden");
  HostTensor grad_rows = HostTensor::make(DType::F32, {c.rows}, "grad_rows");
  for (int64_t r = 0; r < c.rows && prog.reduction == Reduction::None; ++r)
    grad_rows.set(r, upstream[r]);
  std::vector<HostTensor> d_weights, d_biases;
  CpuLinearCeBackwardArgs args{.lse = lse.view,
                               .grad_loss = c.grad_loss,
                               .grad_rows = grad_rows.view,
                               .d_hidden = d_hidden.view,
                               .tempered_lse = tempered_lse.view,
                               .teacher_lse = teacher_lse.view,
                               .filter_threshold = c.filter_threshold};
  for (const Segment& s : prog.segments) {
    d_weights.push_back(poisoned(c.dtype, {s.size(), c.dim}, "d_" + s.weight));
    d_biases.push_back(poisoned(DType::F32, {s.size()}, "d_bias"));
  }
  for (size_t s = 0; s < d_weights.size(); ++s) {
    args.d_weights.push_back(d_weights[s].view);
    args.d_biases.push_back(d_biases[s].view);
  }
  const CpuLinearCeBackwardStats stats = cpu_linear_ce_backward(*hooks, prog, in, args);

  // The reference on the same (dtype-rounded) values.
  std::vector<float> e = floats(hidden), et = floats(teacher_hidden);
  std::vector<int32_t> t(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) t[r] = static_cast<int32_t>(targets.get(r));
  RefLinearCe ref{.n_rows = c.rows, .dim = c.dim, .hidden = e.data(), .targets = t.data()};
  ref.segments = student.reference(prog.segments);
  ref.ignore_index = prog.ignore_index;
  ref.label_smoothing = prog.label_smoothing;
  ref.z_loss = prog.z_loss;
  ref.reduction = static_cast<RefReduction>(prog.reduction);
  EvalContext ctx = eval_context(bound.bindings);
  auto mod = std::make_shared<CompiledEval>(prog.logit, ctx);
  auto grad = std::make_shared<CompiledEval>(lowered.logit_grad, ctx);
  ref.logit_mod = [mod](double x, int64_t r, int64_t id) { return mod->eval_logit(x, r, id); };
  ref.logit_grad = [grad](double x, int64_t r, int64_t id) { return grad->eval_logit(x, r, id); };
  ref.upstream = upstream.data();
  if (kl)
    ref.kl = RefKl{prog.kl->alpha, prog.kl->temperature, et.data(), teacher_dim,
                   teacher.reference(teacher_segments)};
  ref.filter_threshold = stats.filter_threshold;
  RefLinearCeResult want = reference_linear_ce(ref, 2);

  const double ts = c.dtype == DType::F32 ? 1.0 : 30.0;
  EXPECT_NEAR(loss, want.loss, 1e-4 * (1 + std::fabs(want.loss)));
  EXPECT_LE(scaled_error(doubles(lse), want.lse, 1e-4, 1e-5), 1.0) << "lse";
  EXPECT_LE(scaled_error(doubles(row_loss), want.row_loss, 1e-4, 1e-4), 1.0) << "row loss";
  if (kl) {
    EXPECT_LE(scaled_error(doubles(tempered_lse), want.tempered_lse, 1e-4, 1e-5), 1.0)
        << "tempered lse";
    EXPECT_LE(scaled_error(doubles(teacher_lse), want.teacher_lse, 1e-4, 1e-5), 1.0)
        << "teacher lse";
  }
  EXPECT_LE(
      error_with_slack(doubles(d_hidden), want.d_hidden, want.d_hidden_slack, 1e-5 * ts, 1e-3 * ts),
      1.0)
      << "dE";
  for (size_t s = 0; s < prog.segments.size(); ++s) {
    const std::vector<double> no_slack;
    EXPECT_LE(error_with_slack(doubles(d_weights[s]), want.d_weight[s],
                               want.d_weight_slack.empty() ? no_slack : want.d_weight_slack[s],
                               1e-5 * ts, 1e-3 * ts),
              1.0)
        << "dC of segment " << s;
    if (!prog.segments[s].bias.empty()) {
      EXPECT_LE(
          error_with_slack(doubles(d_biases[s]), want.d_bias[s],
                           want.d_bias_slack.empty() ? no_slack : want.d_bias_slack[s], 1e-5, 1e-3),
          1.0)
          << "dbias " << s;
    }
  }
  return stats;
}

}  // namespace tilejit::testing
