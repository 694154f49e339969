// The fp32 inner loops the CPU executors share: one row against a transposed tile (scores,
// logits), weighted sums of rows (P V, dS K, G C), axpy, and an exp for softmax arguments.
// They are register-blocked for the auto-vectoriser and, on x86-64 with GCC, compiled for both
// the baseline and AVX2/FMA and picked at load time. Results are deterministic on one machine
// (FMA contraction may change the last bit between machines).
#pragma once

#include <cstdint>
#include <cstring>

namespace tilejit::cpu {

// exp(x) for softmax arguments (x <= 0 up to rounding): range reduction to |r| <= ln2/2 and a
// degree-6 polynomial, ~2 ulp; 0 below -87 (f32 subnormals are flushed); NaN stays NaN.
// Branch-free so that loops over it vectorise, unlike calls to std::exp.
inline float softmax_exp(float x) {
  float y = x < -87.0f ? -87.0f : x;
  y = y > 88.0f ? 88.0f : y;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float k = (y * 1.44269504f + magic) - magic;
  float r = y - k * 0.693145751953125f - k * 1.428606765330187e-06f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t e = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof scale);
  return x < -87.0f ? 0.0f : p * scale;
}

// s[j] = sum_d x[d] * t[d * ld + j] for j < n: one row against a tile stored transposed.
void dot_transposed(const float* x, const float* t, int dim, int ld, int n, float* s);

// out[d] += sum_j w[j] * rows[j * dim + d] for d < dim (rows with w[j] == 0 are skipped).
void accumulate_rows(const float* w, const float* rows, int n, int dim, float* out);

// y[0..n) += a * x[0..n)
void axpy(float a, const float* x, float* y, int n);

// x[j] = softmax_exp(x[j] - shift); returns the sum.
float exp_shifted(float* x, int n, float shift);

// Transposes rows [n x dim] (row stride dim) into t [dim x ld].
inline void transpose_into(const float* rows, int n, int dim, float* t, int ld) {
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < dim; ++d) t[static_cast<int64_t>(d) * ld + j] = rows[static_cast<int64_t>(j) * dim + d];
}

}  // namespace tilejit::cpu
