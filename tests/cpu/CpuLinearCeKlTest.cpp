// The KL (distillation) term of the CPU fused linear cross-entropy, forward and backward, against
// the fp64 reference: the teacher on the student's weights and on a layout of its own (split
// differently, its own hidden size and biases), temperatures other than 1, alpha in (0, 1) and
// alpha = 1, combined with soft-capping, label smoothing and z-loss, each reduction, ignored rows,
// gradient filtering on and off, random layouts, the distillation example program; and the clear
// errors for a missing or malformed teacher.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "compiler/Error.h"
#include "dsl/TextForm.h"
#include "runtime/cpu/CpuLinearCe.h"
#include "tests/cpu/CpuTestSupport.h"
#include "tests/cpu/LinearCeCase.h"
#include "tests/support/SourceTree.h"

namespace tilejit::testing {
namespace {

TEST(CpuLinearCeKl, TeacherOnTheStudentsWeights) {
  check_linear_ce_case(
      "loss self {\n segment vocab : [0, 900) weight W bias b\n kl alpha = 0.4 temperature = "
      "2\n}\n",
      {});
}

TEST(CpuLinearCeKl, TeacherLayoutOfItsOwn) {
  // Student: two segments with dead ids between them; teacher: the same live ids in three
  // segments split elsewhere, a bias on one, hidden size 16 instead of 24.
  check_linear_ce_case(
      "loss own {\n segment base : [0, 600) weight Wb bias bb\n segment extra : [700, 1000) weight "
      "We\n"
      " kl alpha = 0.7 temperature = 0.5\n"
      " teacher segment t0 : [0, 250) weight T0\n teacher segment t1 : [250, 600) weight T1 bias "
      "tb\n"
      " teacher segment t2 : [700, 1000) weight T2\n reduction = sum\n}\n",
      {.rows = 50, .teacher_dim = 16});
}

TEST(CpuLinearCeKl, AlphaOneWithSoftcapSmoothingZLoss) {
  check_linear_ce_case(
      "loss pure {\n param cap : f32\n segment vocab : [3, 1200) weight W\n"
      " logit = cap * tanh(logit / cap)\n label_smoothing = 0.1\n z_loss = 0.001\n"
      " kl alpha = 1 temperature = 3\n teacher segment v : [3, 1200) weight Wt\n"
      " reduction = none\n ignore_index = -1\n}\n",
      {.rows = 45, .teacher_dim = 40});
}

TEST(CpuLinearCeKl, EachReduction) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    SCOPED_TRACE(reduction);
    check_linear_ce_case(fmt::format("loss r {{\n segment vocab : [0, 700) weight W\n"
                                     " label_smoothing = 0.05\n kl alpha = 0.5 temperature = 1.5\n"
                                     " reduction = {}\n}}\n",
                                     reduction),
                         {.rows = 33});
  }
}

TEST(CpuLinearCeKl, LogitModReadsRowAndBufferOnBothModels) {
  check_linear_ce_case(
      "loss rows {\n buffer temp : f32[N]\n segment a : [0, 300) weight Wa\n"
      " segment b : [400, 650) weight Wb bias bias_b\n logit = logit * (1.5 + temp[row])\n"
      " kl alpha = 0.25 temperature = 2\n teacher segment t : [0, 300) weight Ta\n"
      " teacher segment u : [400, 650) weight Tb\n}\n",
      {.rows = 40, .teacher_dim = 8});
}

TEST(CpuLinearCeKl, Bf16AndF16WithTheDefaultFilter) {
  const char* text =
      "loss lm {\n segment vocab : [0, 1500) weight W\n label_smoothing = 0.1\n"
      " kl alpha = 0.5 temperature = 2\n teacher segment v : [0, 1500) weight Wt\n}\n";
  for (DType dtype : {DType::BF16, DType::F16}) {
    CpuLinearCeBackwardStats stats = check_linear_ce_case(
        text, {.rows = 40, .dtype = dtype, .hidden_amplitude = 20, .filter_threshold = -1});
    EXPECT_EQ(stats.filter_threshold, dtype == DType::BF16 ? 1.0f / 4096 : 1.0f / 32768);
    EXPECT_GT(stats.skipped, 0) << dtype_name(dtype);
  }
}

// Peaked distributions: most (row, chunk) pairs are negligible; the gradients stay within what
// the dropped entries can account for, the uniform smoothing term is kept analytically.
TEST(CpuLinearCeKl, FilteringSkipsNegligibleChunks) {
  const char* text =
      "loss f {\n segment a : [0, 900) weight Wa bias ba\n segment b : [1000, 1700) weight Wb\n"
      " label_smoothing = 0.1\n z_loss = 0.0001\n kl alpha = 0.3 temperature = 1.5\n"
      " teacher segment t : [0, 900) weight Ta\n teacher segment u : [1000, 1700) weight Tb\n}\n";
  CpuLinearCeBackwardStats on = check_linear_ce_case(
      text, {.rows = 48, .dim = 32, .hidden_amplitude = 20, .filter_threshold = 1e-4f});
  EXPECT_EQ(on.filter_threshold, 1e-4f);
  EXPECT_GT(on.skipped, on.pairs / 4);
  CpuLinearCeBackwardStats off =
      check_linear_ce_case(text, {.rows = 48, .dim = 32, .hidden_amplitude = 20});
  EXPECT_EQ(off.skipped, 0);
  // f32 inputs filter only when asked.
  EXPECT_EQ(check_linear_ce_case(text, {.rows = 20, .filter_threshold = -1}).skipped, 0);
}

TEST(CpuLinearCeKl, SmoothingWithALogitModTurnsFilteringOff) {
  CpuLinearCeBackwardStats stats = check_linear_ce_case(
      "loss capped {\n param cap : f32\n segment vocab : [0, 800) weight W\n"
      " logit = cap * tanh(logit / cap)\n label_smoothing = 0.1\n kl alpha = 0.5 temperature = "
      "1\n}\n",
      {.rows = 30, .hidden_amplitude = 12, .filter_threshold = 1e-3f});
  EXPECT_EQ(stats.filter_threshold, 0.0f);
  EXPECT_EQ(stats.skipped, 0);
  // At alpha = 1 the smoothing term is gone, and filtering comes back.
  stats = check_linear_ce_case(
      "loss scaled {\n segment vocab : [0, 800) weight W\n logit = 1.5 * logit\n"
      " label_smoothing = 0.1\n kl alpha = 1 temperature = 1\n}\n",
      {.rows = 30, .hidden_amplitude = 12, .filter_threshold = 1e-3f});
  EXPECT_EQ(stats.filter_threshold, 1e-3f);
  EXPECT_GT(stats.skipped, 0);
}

// A random program: 1-3 segments with gaps, biases, a teacher layout (none, or the same live ids
// split at random points), temperature, alpha (sometimes 1), smoothing, z-loss, soft-cap,
// reduction; random sizes, target dtype and filter threshold.
std::string random_program(std::mt19937_64& rng, int index) {
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  const bool softcap = pick(3) == 0;
  std::string text = fmt::format("loss random{} {{\n", index);
  if (softcap) text += " param cap : f32\n";
  std::vector<std::pair<int64_t, int64_t>> ranges;
  int64_t at = pick(20);
  for (int s = 0, n = 1 + pick(3); s < n; ++s) {
    int64_t size = 40 + pick(500);
    ranges.emplace_back(at, at + size);
    text += fmt::format(" segment s{} : [{}, {}) weight W{}{}\n", s, at, at + size, s,
                        pick(2) ? fmt::format(" bias b{}", s) : "");
    at += size + (pick(2) ? 1 + pick(90) : 0);
  }
  if (softcap) text += " logit = cap * tanh(logit / cap)\n";
  if (pick(2)) text += fmt::format(" label_smoothing = {:.3f}\n", uniform(0.01, 0.3));
  if (pick(2)) text += fmt::format(" z_loss = {:.5f}\n", uniform(1e-5, 1e-3));
  const double alpha = pick(4) == 0 ? 1.0 : uniform(0.05, 0.95);
  text += fmt::format(" kl alpha = {:.3f} temperature = {:.3f}\n", alpha, uniform(0.5, 3.0));
  if (pick(3) != 0) {
    int t = 0;
    for (auto [begin, end] : ranges) {
      for (int64_t b = begin; b < end;) {
        int64_t e = pick(2) ? std::min(end, b + 30 + pick(400)) : end;
        text += fmt::format(" teacher segment t{} : [{}, {}) weight T{}{}\n", t, b, e, t,
                            pick(3) == 0 ? fmt::format(" bias tb{}", t) : "");
        ++t;
        b = e;
      }
    }
  }
  const char* reductions[] = {"none", "sum", "mean"};
  text += fmt::format(" reduction = {}\n}}\n", reductions[pick(3)]);
  return text;
}

TEST(CpuLinearCeKl, RandomLayoutsAndTerms) {
  std::mt19937_64 rng(2024);
  for (int i = 0; i < 8; ++i) {
    std::string text = random_program(rng, i);
    SCOPED_TRACE(text);
    LinearCeCase c;
    c.rows = 10 + static_cast<int64_t>(rng() % 50);
    c.dim = 8 * (1 + static_cast<int64_t>(rng() % 4));
    c.teacher_dim = 8 * (1 + static_cast<int64_t>(rng() % 4));
    c.target_dtype = rng() % 2 ? DType::I64 : DType::I32;
    c.seed = rng();
    c.hidden_amplitude = rng() % 2 ? 1.0 : 3.0;
    c.filter_threshold = rng() % 2 ? 0.0f : 1e-4f;
    check_linear_ce_case(text, c);
  }
}

TEST(CpuLinearCeKl, DistillationExample) {
  std::ifstream file(tilejit::testing::examples_dir() + "/distill.tj");
  ASSERT_TRUE(file) << "examples/programs/distill.tj";
  std::stringstream text;
  text << file.rdbuf();
  ASSERT_TRUE(parse_loss(text.str()).kl.has_value());
  check_linear_ce_case(text.str(), {.rows = 6, .dim = 8, .teacher_dim = 12});
}

// ---- errors ------------------------------------------------------------------------------------

struct KlCall {
  LoweredLoss lowered;
  std::unique_ptr<LossRowHooks> hooks;
  HostTensor e = HostTensor::make(DType::F32, {4, 8}, "hidden");
  HostTensor et = HostTensor::make(DType::F32, {4, 6}, "teacher_hidden");
  HostTensor w = HostTensor::make(DType::F32, {10, 8}, "W");
  HostTensor wt = HostTensor::make(DType::F32, {10, 6}, "W_teacher");
  HostTensor t = HostTensor::make(DType::I32, {4}, "targets");
  HostTensor l = HostTensor::make(DType::F32, {4}, "lse");
  CpuLinearCeInputs in;
  CpuLinearCeForwardOutputs out;

  explicit KlCall(const std::string& text) : lowered(lower(parse_loss(text))) {
    hooks = make_row_hooks(lowered, {});
    in = {.hidden = e.view,
          .targets = t.view,
          .weights = {w.view},
          .teacher_hidden = et.view,
          .teacher_weights = {wt.view}};
    out = {.lse = l.view, .row_loss = l.view, .tempered_lse = l.view, .teacher_lse = l.view};
  }
  void expect_error(const std::string& needle) const {
    try {
      cpu_linear_ce_forward(*hooks, lowered.program, in, out);
      ADD_FAILURE() << "no error; expected one naming " << needle;
    } catch (const UserError& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  }
};

const char* const kOwnTeacher =
    "loss d {\n segment v : [0, 10) weight W\n kl alpha = 0.5 temperature = 2\n"
    " teacher segment v : [0, 10) weight W_teacher\n}\n";
const char* const kSharedTeacher =
    "loss s {\n segment v : [0, 10) weight W\n kl alpha = 0.5 temperature = 2\n}\n";

TEST(CpuLinearCeKl, TeacherMisuseIsAUserError) {
  KlCall ok(kOwnTeacher);
  EXPECT_NO_THROW(cpu_linear_ce_forward(*ok.hooks, ok.lowered.program, ok.in, ok.out));

  KlCall missing(kOwnTeacher);
  missing.in.teacher_hidden = {};
  missing.expect_error("teacher's hidden states");
  KlCall dtype(kOwnTeacher);
  HostTensor ints = HostTensor::make(DType::I32, {4, 6}, "teacher_hidden");
  dtype.in.teacher_hidden = ints.view;
  dtype.expect_error("'teacher_hidden' must have dtype");
  KlCall rows(kOwnTeacher);
  HostTensor short_rows = HostTensor::make(DType::F32, {3, 6}, "teacher_hidden");
  rows.in.teacher_hidden = short_rows.view;
  rows.expect_error("'teacher_hidden': dimension 0 (rows)");
  KlCall wide(kOwnTeacher);
  HostTensor wide_hidden = HostTensor::make(DType::F32, {4, 7}, "teacher_hidden");
  wide.in.teacher_hidden = wide_hidden.view;
  wide.expect_error("teacher weight 'W_teacher' of segment 'v' has 6 columns");
  KlCall no_weights(kOwnTeacher);
  no_weights.in.teacher_weights.clear();
  no_weights.expect_error("0 teacher weight tensors for 1 teacher segments");
  KlCall no_lse(kOwnTeacher);
  no_lse.out.teacher_lse = {};
  no_lse.expect_error("teacher_lse");

  KlCall shared(kSharedTeacher);
  shared.expect_error("no teacher layout");
  shared.in.teacher_weights.clear();
  shared.expect_error("need D = 8 columns, got 6");

  KlCall plain("loss p {\n segment v : [0, 10) weight W\n}\n");
  plain.in.teacher_weights.clear();
  plain.expect_error("no kl term");
}

TEST(CpuLinearCeKl, BadFilterThresholdIsAUserError) {
  KlCall c(kSharedTeacher);
  HostTensor et = HostTensor::make(DType::F32, {4, 8}, "teacher_hidden");
  c.in.teacher_hidden = et.view;
  c.in.teacher_weights.clear();
  cpu_linear_ce_forward(*c.hooks, c.lowered.program, c.in, c.out);
  HostTensor dh = HostTensor::make(DType::F32, {4, 8}, "d_hidden"),
             dw = HostTensor::make(DType::F32, {10, 8}, "d_W");
  for (float bad : {std::nanf(""), 1.0f, INFINITY}) {
    CpuLinearCeBackwardArgs a{.lse = c.l.view,
                              .d_hidden = dh.view,
                              .d_weights = {dw.view},
                              .tempered_lse = c.l.view,
                              .teacher_lse = c.l.view,
                              .filter_threshold = bad};
    EXPECT_THROW(cpu_linear_ce_backward(*c.hooks, c.lowered.program, c.in, a), UserError) << bad;
  }
}

}  // namespace
}  // namespace tilejit::testing
