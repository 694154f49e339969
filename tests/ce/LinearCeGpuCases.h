// The cases the fused linear cross-entropy GPU tests share (LinearCeGpuTest.cpp,
// LinearCeOrderKlGpuTest.cpp), their programs' text, and the fixture, which skips without a
// GPU; the problem that runs and checks a case is LinearCeGpuProblem.h's.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "tests/ce/LinearCeGpuProblem.h"

namespace tilejit::testing::linear_ce_gpu {

inline std::string layout_text(const std::vector<SegSpec>& segs) {
  std::string s;
  for (size_t i = 0; i < segs.size(); ++i)
    s += fmt::format("  segment s{} : [{}, {}) weight W{}{}\n", i, segs[i].begin,
                     segs[i].begin + segs[i].size, i,
                     segs[i].bias ? fmt::format(" bias b{}", i) : "");
  return s;
}

// The `kl` line and, for a teacher with its own weights, its segments (cut like the student's).
inline std::string kl_text(const Case::Kl& kl, const std::vector<SegSpec>& segs) {
  std::string s = fmt::format("  kl alpha = {} temperature = {}\n", kl.alpha, kl.temperature);
  if (!kl.own_teacher) return s;
  for (size_t i = 0; i < segs.size(); ++i) {
    const bool shared = (kl.shared_segments >> i) & 1;
    s += fmt::format("  teacher segment t{} : [{}, {}) weight {}{}{}\n", i, segs[i].begin,
                     segs[i].begin + segs[i].size, shared ? "W" : "T", i,
                     segs[i].bias ? fmt::format(" bias {}{}", shared ? "b" : "tb", i) : "");
  }
  return s;
}

class LinearCeGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no GPU: " << Driver::unavailable_reason();
    Driver::get()->use_device(0);
  }
};

// Runs the case twice, forward and backward each time, checking both against the reference,
// and expects the same dE bits from both runs.
inline void expect_same_d_hidden_twice(const Case& c) {
  Problem p(c);
  p.check();
  std::vector<float> first = p.last_d_hidden();
  p.check();
  EXPECT_EQ(std::memcmp(first.data(), p.last_d_hidden().data(), first.size() * 4), 0) << c.name;
}

inline const std::vector<SegSpec> kGapped = {{0, 1000, false}, {1130, 200, true}};

inline Case gapped(const char* name, float threshold) {
  return {.name = name,
          .program = "loss gapped {\n" + layout_text(kGapped) + "}\n",
          .segments = kGapped,
          .n = 300,
          .d = 128,
          .peak = 20,
          .threshold = threshold,
          .seed = 3};
}

// Biased ids (a prior of spread 8 logits; rows add ~1 of noise): the ~2% of ids within reach of
// the top are scattered over nearly every tile in natural order and fill one or two tiles ordered
// by average logit, so most tiles are skipped and most (uniform) targets become corrections.
inline Case prior_case(const char* name, VocabOrdering ordering) {
  std::vector<SegSpec> segs = {{0, 4000, true}};
  return {.name = name,
          .program = "loss prior {\n" + layout_text(segs) + "}\n",
          .segments = segs,
          .n = 600,
          .d = 128,
          .seed = 21,
          .ordering = ordering,
          .bias_scale = 8};
}

// Flat rows, every tile alive: the forward visits the order, the backward every tile in natural
// order. Nothing is skipped, so the results are the exact (unfiltered, natural) ones up to fp32
// summation order. (With tiles skipped, the two orders drop different entries, each below the
// threshold: on peaked rows those make up the whole gradient, so only the dropped-mass bound of
// check() compares them.)
inline Case flat_case(const char* name, float threshold, VocabOrdering ordering) {
  std::vector<SegSpec> segs = {{0, 900, false}, {1000, 250, true}};
  return {.name = name,
          .program = "loss flat {\n" + layout_text(segs) + "}\n",
          .segments = segs,
          .n = 400,
          .d = 64,
          .threshold = threshold,
          .seed = 23,
          .ordering = ordering};
}

}  // namespace tilejit::testing::linear_ce_gpu
