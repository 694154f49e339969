// CPU fused linear cross-entropy, forward and backward, against the fp64 reference
// (tests/support/LinearCeReference.h) that materialises the logits: segments with dead ids
// between them, biases, soft-capping through logit_mod, label smoothing, z-loss, ignore_index,
// each reduction, 16-bit inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "compiler/Error.h"
#include "dsl/TextForm.h"
#include "runtime/cpu/CpuLinearCe.h"
#include "tests/cpu/CpuTestSupport.h"
#include "tests/support/LinearCeReference.h"

namespace tilejit::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Case {
  int64_t rows = 70, dim = 24;
  DType dtype = DType::F32;
  double ignored_fraction = 0.2;
  uint64_t seed = 3;
  float grad_loss = 0.75f;
};

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

void check_case(const std::string& text, const Case& c) {
  LoweredLoss lowered = lower(parse_loss(text));
  const LossProgram& prog = lowered.program;
  SCOPED_TRACE(fmt::format("loss {} dtype {}", prog.name, dtype_name(c.dtype)));
  std::mt19937_64 rng(c.seed);
  BoundValues bound = bind_random(prog.buffers, prog.params, {{"N", c.rows}, {"V", prog.vocab_end()}}, rng);
  auto hooks = make_row_hooks(lowered, bound.bindings);

  HostTensor hidden = HostTensor::make(c.dtype, {c.rows, c.dim}, "hidden");
  fill_random(hidden, rng, 1.0);
  HostTensor targets = HostTensor::make(DType::I32, {c.rows}, "targets");
  std::vector<int64_t> live;
  for (const Segment& s : prog.segments)
    for (int64_t id = s.begin; id < s.end; ++id) live.push_back(id);
  for (int64_t r = 0; r < c.rows; ++r) {
    bool ignore = std::uniform_real_distribution<double>(0, 1)(rng) < c.ignored_fraction;
    targets.set(r, ignore ? static_cast<double>(prog.ignore_index) : static_cast<double>(live[rng() % live.size()]));
  }
  std::vector<HostTensor> weights, biases, d_weights, d_biases;
  for (const Segment& s : prog.segments) {
    weights.push_back(HostTensor::make(c.dtype, {s.size(), c.dim}, s.weight));
    fill_random(weights.back(), rng, 0.8);
    biases.push_back(HostTensor::make(DType::F32, {s.size()}, s.bias));
    fill_random(biases.back(), rng, s.bias.empty() ? 0.0 : 0.5);
    d_weights.push_back(HostTensor::make(c.dtype, {s.size(), c.dim}, "d_" + s.weight));
    d_weights.back().fill(kNaN);
    d_biases.push_back(HostTensor::make(DType::F32, {s.size()}, "d_bias"));
    d_biases.back().fill(kNaN);
  }
  CpuLinearCeInputs in{hidden.view, targets.view, {}, {}};
  for (size_t s = 0; s < weights.size(); ++s) {
    in.weights.push_back(weights[s].view);
    in.biases.push_back(biases[s].view);
  }
  HostTensor lse = HostTensor::make(DType::F32, {c.rows}, "lse"),
             row_loss = HostTensor::make(DType::F32, {c.rows}, "row_loss"),
             target = HostTensor::make(DType::F32, {c.rows}, "target_logit");
  for (HostTensor* t : {&lse, &row_loss, &target}) t->fill(kNaN);
  double loss = cpu_linear_ce_forward(*hooks, prog, in, {lse.view, row_loss.view, target.view});

  // The reference on the same (dtype-rounded) values.
  std::vector<float> e = floats(hidden);
  std::vector<int32_t> t(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) t[r] = static_cast<int32_t>(targets.get(r));
  std::vector<std::vector<float>> w, b;
  RefLinearCe ref;
  ref.n_rows = c.rows;
  ref.dim = c.dim;
  ref.hidden = e.data();
  ref.targets = t.data();
  for (size_t s = 0; s < weights.size(); ++s) {
    w.push_back(floats(weights[s]));
    b.push_back(floats(biases[s]));
  }
  for (size_t s = 0; s < weights.size(); ++s)
    ref.segments.push_back({prog.segments[s].begin, prog.segments[s].size(), w[s].data(),
                            prog.segments[s].bias.empty() ? nullptr : b[s].data()});
  ref.ignore_index = prog.ignore_index;
  ref.label_smoothing = prog.label_smoothing;
  ref.z_loss = prog.z_loss;
  ref.reduction = static_cast<RefReduction>(prog.reduction);
  EvalContext ctx = eval_context(bound.bindings);
  auto mod = std::make_shared<CompiledEval>(prog.logit, ctx);
  auto grad = std::make_shared<CompiledEval>(lowered.logit_grad, ctx);
  ref.logit_mod = [mod](double x, int64_t r, int64_t id) { return mod->eval_logit(x, r, id); };
  ref.logit_grad = [grad](double x, int64_t r, int64_t id) { return grad->eval_logit(x, r, id); };
  std::vector<float> upstream(c.rows);
  for (float& u : upstream) u = std::uniform_real_distribution<float>(-1, 1)(rng);
  if (prog.reduction != Reduction::None) upstream.assign(1, c.grad_loss);
  ref.upstream = upstream.data();
  RefLinearCeResult want = reference_linear_ce(ref);

  const double ts = c.dtype == DType::F32 ? 1.0 : 30.0;
  EXPECT_NEAR(loss, want.loss, 1e-4 * (1 + std::fabs(want.loss)));
  EXPECT_LE(scaled_error(doubles(lse), want.lse, 1e-4, 1e-5), 1.0) << "lse";
  EXPECT_LE(scaled_error(doubles(row_loss), want.row_loss, 1e-4, 1e-4), 1.0) << "row loss";

  HostTensor d_hidden = HostTensor::make(c.dtype, {c.rows, c.dim}, "d_hidden");
  d_hidden.fill(kNaN);
  HostTensor grad_rows = HostTensor::make(DType::F32, {c.rows}, "grad_rows");
  for (int64_t r = 0; r < c.rows && prog.reduction == Reduction::None; ++r) grad_rows.set(r, upstream[r]);
  CpuLinearCeBackwardArgs args{lse.view, c.grad_loss, grad_rows.view, d_hidden.view, {}, {}};
  for (size_t s = 0; s < weights.size(); ++s) {
    args.d_weights.push_back(d_weights[s].view);
    args.d_biases.push_back(d_biases[s].view);
  }
  cpu_linear_ce_backward(*hooks, prog, in, args);
  EXPECT_LE(scaled_error(doubles(d_hidden), want.d_hidden, 1e-5 * ts, 1e-3 * ts), 1.0) << "dE";
  for (size_t s = 0; s < weights.size(); ++s) {
    EXPECT_LE(scaled_error(doubles(d_weights[s]), want.d_weight[s], 1e-5 * ts, 1e-3 * ts), 1.0)
        << "dC of segment " << s;
    if (!prog.segments[s].bias.empty()) {
      EXPECT_LE(scaled_error(doubles(d_biases[s]), want.d_bias[s], 1e-5, 1e-3), 1.0) << "dbias " << s;
    }
  }
}

TEST(CpuLinearCe, PlainMean) {
  check_case("loss plain {\n segment vocab : [0, 1000) weight W\n}\n", {});
}

TEST(CpuLinearCe, SegmentsWithGapAndBias) {
  check_case("loss two {\n segment base : [0, 700) weight Wb bias bb\n"
             " segment extra : [830, 1100) weight We\n reduction = sum\n}\n",
             {});
}

TEST(CpuLinearCe, SoftcapSmoothingZLossNoReduction) {
  check_case("loss gemma {\n param cap : f32\n segment vocab : [3, 2900) weight W\n"
             " logit = cap * tanh(logit / cap)\n label_smoothing = 0.1\n z_loss = 0.001\n"
             " reduction = none\n ignore_index = -1\n}\n",
             {.rows = 45, .dim = 32});
}

TEST(CpuLinearCe, LogitModReadsBufferRowAndId) {
  check_case("loss biased {\n buffer temp : f32[N]\n segment a : [0, 300) weight Wa\n"
             " segment b : [400, 650) weight Wb bias bias_b\n"
             " logit = logit * (1.5 + temp[row]) + f32(id % 7) * 0.1\n label_smoothing = 0.2\n}\n",
             {.rows = 40});
}

TEST(CpuLinearCe, Bf16AndF16Inputs) {
  const char* text = "loss lm {\n segment vocab : [0, 1500) weight W\n z_loss = 0.0001\n}\n";
  check_case(text, {.dtype = DType::BF16});
  check_case(text, {.dtype = DType::F16});
}

TEST(CpuLinearCe, AllRowsIgnored) {
  check_case("loss lm {\n segment vocab : [0, 300) weight W\n}\n", {.rows = 20, .ignored_fraction = 2});
}

TEST(CpuLinearCe, RejectsKlAndDeadTargets) {
  LoweredLoss kl = lower(parse_loss("loss d {\n segment v : [0, 10) weight W\n"
                                    " kl alpha = 0.5 temperature = 1\n}\n"));
  HostTensor e = HostTensor::make(DType::F32, {2, 8}, "hidden"), w = HostTensor::make(DType::F32, {10, 8}, "W");
  HostTensor t = HostTensor::make(DType::I32, {2}, "targets"), l = HostTensor::make(DType::F32, {2}, "lse");
  auto hooks = make_row_hooks(kl, {});
  CpuLinearCeInputs in{e.view, t.view, {w.view}, {}};
  EXPECT_THROW(cpu_linear_ce_forward(*hooks, kl.program, in, {l.view, l.view, {}}), UserError);

  LoweredLoss gap = lower(parse_loss("loss g {\n segment a : [0, 5) weight A\n segment b : [7, 10) weight B\n}\n"));
  HostTensor wa = HostTensor::make(DType::F32, {5, 8}, "A"), wb = HostTensor::make(DType::F32, {3, 8}, "B");
  t.set(0, 6);  // a dead id
  auto gap_hooks = make_row_hooks(gap, {});
  EXPECT_THROW(cpu_linear_ce_forward(*gap_hooks, gap.program, {e.view, t.view, {wa.view, wb.view}, {}},
                                     {l.view, l.view, {}}),
               UserError);
}

}  // namespace
}  // namespace tilejit::testing
