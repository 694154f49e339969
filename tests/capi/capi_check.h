/* Checks for the C ABI test: failures are counted and reported with their line, and the test
 * goes on, so one run lists every problem. Random inputs come from a seeded generator whose
 * seed is printed (TILEJIT_TEST_SEED repeats a run). */
#ifndef TILEJIT_CAPI_CHECK_H
#define TILEJIT_CAPI_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "tilejit.h"

extern int g_failures;

void check_at(int ok, const char* file, int line, const char* what);
#define CHECK(cond) check_at((cond) != 0, __FILE__, __LINE__, #cond)

/* A call that must succeed: on failure, its status and tj_last_error() are printed. */
void expect_ok_at(tj_status status, const char* file, int line, const char* call);
#define EXPECT_OK(call) expect_ok_at((call), __FILE__, __LINE__, #call)

/* A call that must fail with `code`, a non-empty message containing `fragment` (NULL: any). */
void expect_error_at(tj_status status, tj_status code, const char* fragment, const char* file,
                     int line, const char* call);
#define EXPECT_ERROR(call, code, fragment) \
  expect_error_at((call), (code), (fragment), __FILE__, __LINE__, #call)

/* |got - want| <= tol * (1 + |want|) for every element; reports the worst one. */
void expect_close_at(const char* what, const float* got, const double* want, size_t n, double tol,
                     const char* file, int line);
#define EXPECT_CLOSE(what, got, want, n, tol) \
  expect_close_at((what), (got), (want), (n), (tol), __FILE__, __LINE__)

/* Random numbers: uniform in [lo, hi), and integers in [0, n). */
void rng_seed(uint64_t seed);
double rng_uniform(double lo, double hi);
int64_t rng_below(int64_t n);

/* NaN in every element: an output that is not written shows up. */
void poison(float* v, size_t n);

/* A descriptor of host memory (strides NULL: contiguous). */
tj_tensor host_tensor(void* data, tj_dtype dtype, int ndim, const int64_t* shape,
                      const int64_t* strides);

/* bf16 <-> f32 (round to nearest even). */
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);

/* The value tests and the error tests (capi_test.c, capi_loss.c, capi_errors.c). */
void test_programs(void);
void test_attention(void);
void test_linear_ce(void);
void test_errors(void);

#endif
