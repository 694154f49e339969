// CPU fused linear cross-entropy, forward and backward, against the fp64 reference
// (tests/support/LinearCeReference.h) that materialises the logits: segments with dead ids
// between them, biases, soft-capping through logit_mod, label smoothing, z-loss, ignore_index,
// each reduction, 16-bit inputs, i64 targets. The KL term: CpuLinearCeKlTest.cpp.
#include <gtest/gtest.h>

#include "compiler/Error.h"
#include "dsl/TextForm.h"
#include "runtime/cpu/CpuLinearCe.h"
#include "tests/cpu/CpuTestSupport.h"
#include "tests/cpu/LinearCeCase.h"

namespace tilejit::testing {
namespace {

void check_case(const std::string& text, const LinearCeCase& c) { check_linear_ce_case(text, c); }

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

TEST(CpuLinearCe, I64Targets) {
  check_case("loss wide {\n segment a : [0, 400) weight Wa\n segment b : [520, 900) weight Wb\n"
             " ignore_index = -1\n reduction = sum\n}\n",
             {.rows = 40, .target_dtype = DType::I64});
}

// A target that is neither ignore_index nor a live id is a UserError naming it, in i32 and i64.
TEST(CpuLinearCe, RejectsDeadAndOutOfRangeTargets) {
  LoweredLoss gap = lower(parse_loss("loss g {\n segment a : [0, 5) weight A\n segment b : [7, 10) weight B\n}\n"));
  HostTensor e = HostTensor::make(DType::F32, {2, 8}, "hidden"), l = HostTensor::make(DType::F32, {2}, "lse");
  HostTensor wa = HostTensor::make(DType::F32, {5, 8}, "A"), wb = HostTensor::make(DType::F32, {3, 8}, "B");
  auto hooks = make_row_hooks(gap, {});
  for (DType dtype : {DType::I32, DType::I64}) {
    for (double bad : {6.0, 10.0, -5.0, dtype == DType::I64 ? 0x1p40 : 11.0}) {
      HostTensor t = HostTensor::make(dtype, {2}, "targets");
      t.set(1, bad);
      try {
        cpu_linear_ce_forward(*hooks, gap.program, {.hidden = e.view, .targets = t.view, .weights = {wa.view, wb.view}},
                              {.lse = l.view, .row_loss = l.view});
        ADD_FAILURE() << "target " << bad << " accepted";
      } catch (const UserError& err) {
        EXPECT_NE(std::string(err.what()).find("not a live id"), std::string::npos) << err.what();
      }
    }
  }
  HostTensor f = HostTensor::make(DType::F32, {2}, "float_targets");
  EXPECT_THROW(cpu_linear_ce_forward(*hooks, gap.program, {.hidden = e.view, .targets = f.view, .weights = {wa.view, wb.view}},
                                     {.lse = l.view, .row_loss = l.view}),
               UserError);
}

}  // namespace
}  // namespace tilejit::testing
