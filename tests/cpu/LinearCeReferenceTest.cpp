// The fp64 fused linear cross-entropy reference (tests/support/LinearCeReference.h) checked on its
// own: its gradients (dE, dC per segment, dbias) against central finite differences of its loss,
// with every term on (two segments with a gap, a row- and id-dependent soft-cap, smoothing,
// z-loss, KL against a teacher with a layout of its own, ignored rows) under each reduction; and
// its KL value against the definition on a tiny case, and zero when teacher and student agree.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tests/support/LinearCeReference.h"

namespace tilejit::testing {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937_64& rng, double amp) {
  std::uniform_real_distribution<float> u(static_cast<float>(-amp), static_cast<float>(amp));
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A small problem with every term, owning its data.
struct Problem {
  static constexpr int64_t kRows = 7, kDim = 5, kTeacherDim = 4;
  std::mt19937_64 rng{11};
  std::vector<float> e = random_floats(kRows * kDim, rng, 1.0);
  std::vector<float> w0 = random_floats(6 * kDim, rng, 0.8), w1 = random_floats(4 * kDim, rng, 0.8);
  std::vector<float> b1 = random_floats(4, rng, 0.5);
  std::vector<float> et = random_floats(kRows * kTeacherDim, rng, 1.0);
  std::vector<float> t0 = random_floats(3 * kTeacherDim, rng, 0.8),
                     t1 = random_floats(3 * kTeacherDim, rng, 0.8),
                     t2 = random_floats(4 * kTeacherDim, rng, 0.8), tb = random_floats(3, rng, 0.5);
  std::vector<int32_t> targets{0, 10, -100, 5, 12, 3, 9};
  std::vector<float> upstream = random_floats(kRows, rng, 1.0);

  RefLinearCe make(RefReduction reduction) {
    RefLinearCe p{.n_rows = kRows, .dim = kDim, .hidden = e.data(), .targets = targets.data()};
    p.segments = {{0, 6, w0.data(), nullptr}, {9, 4, w1.data(), b1.data()}};
    p.label_smoothing = 0.1;
    p.z_loss = 0.01;
    p.reduction = reduction;
    // cap(row, id) * tanh(x / cap(row, id)) with cap = 2 + row / 4 + id / 8.
    auto cap = [](int64_t r, int64_t id) { return 2.0 + r / 4.0 + id / 8.0; };
    p.logit_mod = [cap](double x, int64_t r, int64_t id) {
      return cap(r, id) * std::tanh(x / cap(r, id));
    };
    p.logit_grad = [cap](double x, int64_t r, int64_t id) {
      double t = std::tanh(x / cap(r, id));
      return 1 - t * t;
    };
    p.upstream = upstream.data();
    p.kl = RefKl{
        0.35,
        1.7,
        et.data(),
        kTeacherDim,
        {{0, 3, t0.data(), nullptr}, {3, 3, t1.data(), tb.data()}, {9, 4, t2.data(), nullptr}}};
    return p;
  }

  // The scalar whose gradient the reference returns: sum_r u_r row_loss_r (none), u * loss.
  double objective(RefReduction reduction) {
    RefLinearCeResult r = reference_linear_ce(make(reduction), 1);
    if (reduction != RefReduction::None) return upstream[0] * r.loss;
    double total = 0;
    for (int64_t i = 0; i < kRows; ++i) total += upstream[i] * r.row_loss[i];
    return total;
  }
};

// Central difference of the objective in one input element.
double finite_difference(Problem& p, RefReduction reduction, float& x) {
  const float x0 = x, plus = x0 + 1e-3f, minus = x0 - 1e-3f;
  x = plus;
  const double up = p.objective(reduction);
  x = minus;
  const double down = p.objective(reduction);
  x = x0;
  return (up - down) / (static_cast<double>(plus) - static_cast<double>(minus));
}

void expect_matches(Problem& p, RefReduction reduction, std::vector<float>& input,
                    const std::vector<double>& gradient, const char* what) {
  ASSERT_EQ(input.size(), gradient.size()) << what;
  for (size_t i = 0; i < input.size(); ++i) {
    const double fd = finite_difference(p, reduction, input[i]);
    EXPECT_NEAR(gradient[i], fd, 1e-6 + 1e-4 * std::fabs(fd)) << what << "[" << i << "]";
  }
}

TEST(LinearCeReference, GradientsMatchFiniteDifferences) {
  for (RefReduction reduction : {RefReduction::None, RefReduction::Sum, RefReduction::Mean}) {
    SCOPED_TRACE(static_cast<int>(reduction));
    Problem p;
    // The upstream value is the one the reference reads: [N] for none, [1] otherwise.
    RefLinearCeResult g = reference_linear_ce(p.make(reduction), 1);
    ASSERT_EQ(g.tempered_lse.size(), size_t(Problem::kRows));
    EXPECT_EQ(g.row_loss[2], 0.0);  // the ignored row
    expect_matches(p, reduction, p.e, g.d_hidden, "dE");
    expect_matches(p, reduction, p.w0, g.d_weight[0], "dC0");
    expect_matches(p, reduction, p.w1, g.d_weight[1], "dC1");
    expect_matches(p, reduction, p.b1, g.d_bias[1], "dbias1");
    EXPECT_TRUE(g.d_bias[0].empty());
  }
}

TEST(LinearCeReference, KlMatchesItsDefinition) {
  // One row, three ids, identity logit_mod, alpha = 1: the loss is T^2 KL(pt || ps).
  const float e[2] = {1.0f, -0.5f}, w[6] = {0.3f, 0.2f, -0.7f, 0.4f, 0.1f, 0.9f};
  const float et[2] = {0.25f, 2.0f}, wt[6] = {0.5f, -0.5f, 0.2f, 0.8f, -1.0f, 0.1f};
  const int32_t target = 1;
  const double temp = 2.5;
  RefLinearCe p{.n_rows = 1, .dim = 2, .hidden = e, .targets = &target};
  p.segments = {{0, 3, w, nullptr}};
  p.reduction = RefReduction::Sum;
  p.kl = RefKl{1.0, temp, et, 2, {{0, 3, wt, nullptr}}};
  RefLinearCeResult r = reference_linear_ce(p, 1);
  double zs[3], zt[3], ss = 0, st = 0;
  for (int j = 0; j < 3; ++j) {
    zs[j] = (double{e[0]} * w[2 * j] + double{e[1]} * w[2 * j + 1]) / temp;
    zt[j] = (double{et[0]} * wt[2 * j] + double{et[1]} * wt[2 * j + 1]) / temp;
    ss += std::exp(zs[j]);
    st += std::exp(zt[j]);
  }
  double kl = 0;
  for (int j = 0; j < 3; ++j) {
    const double ps = std::exp(zs[j]) / ss, pt = std::exp(zt[j]) / st;
    kl += pt * std::log(pt / ps);
  }
  EXPECT_NEAR(r.loss, temp * temp * kl, 1e-12);
  EXPECT_NEAR(r.teacher_lse[0], std::log(st), 1e-12);
  EXPECT_NEAR(r.tempered_lse[0], std::log(ss), 1e-12);

  // A teacher equal to the student: no KL, no gradient.
  p.kl = RefKl{1.0, temp, e, 2, {}};
  r = reference_linear_ce(p, 1);
  EXPECT_NEAR(r.loss, 0.0, 1e-14);
  for (double g : r.d_hidden) EXPECT_NEAR(g, 0.0, 1e-14);
}

}  // namespace
}  // namespace tilejit::testing
