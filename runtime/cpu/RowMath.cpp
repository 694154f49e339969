#include "runtime/cpu/RowMath.h"

// Not under ASan or TSan: the clones' ifunc resolvers, instrumented like the rest, run while the
// program is relocated, before the sanitizer's runtime has started (under TSan they crash there).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define TILEJIT_MULTIVERSION __attribute__((target_clones("arch=haswell", "default")))
#else
#define TILEJIT_MULTIVERSION
#endif

namespace tilejit::cpu {

namespace {
constexpr int kBlock = 16;  // accumulators kept in registers
}  // namespace

TILEJIT_MULTIVERSION
void dot_transposed(const float* x, const float* t, int dim, int ld, int n, float* s) {
  int j0 = 0;
  for (; j0 + kBlock <= n; j0 += kBlock) {
    float acc[kBlock] = {};
    for (int d = 0; d < dim; ++d) {
      const float xd = x[d];
      const float* tr = t + static_cast<int64_t>(d) * ld + j0;
      for (int j = 0; j < kBlock; ++j) acc[j] += xd * tr[j];
    }
    for (int j = 0; j < kBlock; ++j) s[j0 + j] = acc[j];
  }
  if (j0 == n) return;
  float acc[kBlock] = {};
  const int rest = n - j0;
  for (int d = 0; d < dim; ++d) {
    const float xd = x[d];
    const float* tr = t + static_cast<int64_t>(d) * ld + j0;
    for (int j = 0; j < rest; ++j) acc[j] += xd * tr[j];
  }
  for (int j = 0; j < rest; ++j) s[j0 + j] = acc[j];
}

TILEJIT_MULTIVERSION
void accumulate_rows(const float* w, const float* rows, int n, int dim, float* out) {
  int d0 = 0;
  for (; d0 + kBlock <= dim; d0 += kBlock) {
    float acc[kBlock];
    for (int d = 0; d < kBlock; ++d) acc[d] = out[d0 + d];
    for (int j = 0; j < n; ++j) {
      const float wj = w[j];
      if (wj == 0) continue;
      const float* r = rows + static_cast<int64_t>(j) * dim + d0;
      for (int d = 0; d < kBlock; ++d) acc[d] += wj * r[d];
    }
    for (int d = 0; d < kBlock; ++d) out[d0 + d] = acc[d];
  }
  for (int j = 0; j < n && d0 < dim; ++j) {
    const float wj = w[j];
    if (wj == 0) continue;
    const float* r = rows + static_cast<int64_t>(j) * dim;
    for (int d = d0; d < dim; ++d) out[d] += wj * r[d];
  }
}

TILEJIT_MULTIVERSION
void axpy(float a, const float* __restrict x, float* __restrict y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

TILEJIT_MULTIVERSION
float exp_shifted(float* x, int n, float shift) {
  float sum = 0;
  for (int j = 0; j < n; ++j) {
    x[j] = softmax_exp(x[j] - shift);
    sum += x[j];
  }
  return sum;
}

}  // namespace tilejit::cpu
