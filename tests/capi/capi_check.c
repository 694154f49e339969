#include "capi_check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int g_failures = 0;

void check_at(int ok, const char* file, int line, const char* what) {
  if (ok) return;
  ++g_failures;
  fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
}

void expect_ok_at(tj_status status, const char* file, int line, const char* call) {
  if (status == TJ_OK && tj_last_error()[0] == '\0') return;
  ++g_failures;
  fprintf(stderr, "%s:%d: %s\n  returned %s: %s\n", file, line, call, tj_status_name(status),
          tj_last_error());
}

void expect_error_at(tj_status status, tj_status code, const char* fragment, const char* file,
                     int line, const char* call) {
  const char* message = tj_last_error();
  if (status == code && message[0] != '\0' && (!fragment || strstr(message, fragment))) return;
  ++g_failures;
  fprintf(stderr, "%s:%d: %s\n  expected %s with a message containing \"%s\"\n  got %s: \"%s\"\n",
          file, line, call, tj_status_name(code), fragment ? fragment : "", tj_status_name(status),
          message);
}

void expect_close_at(const char* what, const float* got, const double* want, size_t n, double tol,
                     const char* file, int line) {
  size_t worst = 0;
  double worst_excess = 0;
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    double err = fabs((double)got[i] - want[i]);
    double allowed = tol * (1 + fabs(want[i]));
    if (!(err <= allowed)) { /* NaN fails too */
      double excess = isnan(err) ? INFINITY : err / allowed;
      if (!bad || excess > worst_excess) worst = i, worst_excess = excess;
      bad = 1;
    }
  }
  if (!bad) return;
  ++g_failures;
  fprintf(stderr, "%s:%d: %s: element %zu is %.9g, expected %.9g (tolerance %g)\n", file, line,
          what, worst, (double)got[worst], want[worst], tol);
}

static uint64_t g_state = 0x9e3779b97f4a7c15ull;

void rng_seed(uint64_t seed) { g_state = seed ? seed : 0x9e3779b97f4a7c15ull; }

static uint64_t rng_next(void) { /* xorshift64* */
  g_state ^= g_state >> 12;
  g_state ^= g_state << 25;
  g_state ^= g_state >> 27;
  return g_state * 0x2545f4914f6cdd1dull;
}

double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
}

int64_t rng_below(int64_t n) { return (int64_t)(rng_next() % (uint64_t)n); }

void poison(float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) v[i] = NAN;
}

uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

float bf16_to_f32(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

tj_tensor host_tensor(void* data, tj_dtype dtype, int ndim, const int64_t* shape,
                      const int64_t* strides) {
  tj_tensor t = {data, (int32_t)dtype, ndim, shape, strides, TJ_HOST};
  return t;
}
