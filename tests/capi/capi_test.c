/* The C ABI (capi/tilejit.h) from plain C, on host memory (the CPU backend: no GPU needed).
 * Programs from text and from the standard library; attention forward and backward on fresh
 * random f32 and bf16 tensors (GQA, MQA, a permuted q, a document mask with soft-capping, a
 * sliding window) against the fp64 brute force of capi_reference.c, outputs poisoned first;
 * block mask counts against a brute-force tile classification; the fused linear cross-entropy
 * (capi_loss.c); every error path (capi_errors.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capi_check.h"
#include "capi_reference.h"
#include "tilejit.h"

/* ---- programs ----------------------------------------------------------------------------- */

static int is_hex64(const char* s) {
  if (strlen(s) != 64) return 0;
  for (; *s; ++s)
    if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f'))) return 0;
  return 1;
}

void test_programs(void) {
  CHECK(strlen(tj_version()) > 0);
  CHECK(strcmp(tj_status_name(TJ_ERR_PARSE), "TJ_ERR_PARSE") == 0);
  CHECK(strcmp(tj_status_name((tj_status)999), "TJ_ERR_UNKNOWN") == 0);
  CHECK(tj_gpu_available() == 0 || tj_gpu_available() == 1);
  uint64_t held = 1;
  EXPECT_OK(tj_workspace_pool_held(&held));
  if (!tj_gpu_available()) CHECK(held == 0);
  EXPECT_OK(tj_workspace_pool_trim());
  CHECK(tj_workspace_pool_held(NULL) == TJ_ERR_INVALID_ARGUMENT);

  tj_program* p = NULL;
  EXPECT_OK(tj_program_from_text("# causal\nattention my_causal {\n  mask = q >= kv\n}\n",
                                 "my_causal.tj", &p));
  tj_program_kind kind = 0;
  const char *name = NULL, *text = NULL, *hash = NULL;
  EXPECT_OK(tj_program_kind_of(p, &kind));
  EXPECT_OK(tj_program_name(p, &name));
  EXPECT_OK(tj_program_text(p, &text));
  EXPECT_OK(tj_program_hash(p, &hash));
  CHECK(kind == TJ_PROGRAM_ATTENTION);
  CHECK(strcmp(name, "my_causal") == 0);
  CHECK(strstr(text, "attention my_causal {") != NULL);
  CHECK(is_hex64(hash));

  /* The canonical text parses back to the same program: same hash. */
  tj_program* again = NULL;
  const char* hash_again = NULL;
  EXPECT_OK(tj_program_from_text(text, NULL, &again));
  EXPECT_OK(tj_program_hash(again, &hash_again));
  CHECK(strcmp(hash, hash_again) == 0);

  tj_program* loss = NULL;
  int32_t segments = 0;
  EXPECT_OK(tj_program_from_stdlib("two_segments", &loss));
  EXPECT_OK(tj_program_kind_of(loss, &kind));
  EXPECT_OK(tj_program_segment_count(loss, &segments));
  CHECK(kind == TJ_PROGRAM_LOSS);
  CHECK(segments == 2);
  tj_reduction reduction = TJ_REDUCTION_NONE;
  EXPECT_OK(tj_program_reduction(loss, &reduction));
  CHECK(reduction == TJ_REDUCTION_MEAN); /* the default */
  tj_segment_info seg;
  EXPECT_OK(tj_program_segment(loss, 0, &seg));
  CHECK(strcmp(seg.name, "base") == 0 && strcmp(seg.weight, "W_base") == 0);
  CHECK(seg.begin == 0 && seg.end == 151936 && seg.bias == NULL);
  EXPECT_OK(tj_program_segment(loss, 1, &seg));
  CHECK(strcmp(seg.name, "extra") == 0 && strcmp(seg.weight, "W_extra") == 0);
  CHECK(seg.begin == 152066 && seg.end == 153090 && seg.bias == NULL);

  /* A layout written here: a bias, a reduction, segments in the order they are declared. */
  tj_program* head = NULL;
  EXPECT_OK(tj_program_from_text("loss head {\n  segment text : [0, 100) weight W\n"
                                 "  segment act : [110, 134) weight A bias a\n"
                                 "  reduction = sum\n}\n",
                                 NULL, &head));
  EXPECT_OK(tj_program_reduction(head, &reduction));
  CHECK(reduction == TJ_REDUCTION_SUM);
  EXPECT_OK(tj_program_segment(head, 1, &seg));
  CHECK(strcmp(seg.name, "act") == 0 && seg.begin == 110 && seg.end == 134);
  CHECK(strcmp(seg.weight, "A") == 0 && seg.bias != NULL && strcmp(seg.bias, "a") == 0);
  tj_program* none = NULL;
  EXPECT_OK(tj_program_from_text("loss rows {\n  segment v : [0, 8) weight W\n"
                                 "  reduction = none\n}\n",
                                 NULL, &none));
  EXPECT_OK(tj_program_reduction(none, &reduction));
  CHECK(reduction == TJ_REDUCTION_NONE);
  tj_program_destroy(head);
  tj_program_destroy(none);

  tj_program_destroy(p);
  tj_program_destroy(again);
  tj_program_destroy(loss);
  tj_program_destroy(NULL);
}

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct attention_case {
  const char* label;
  const char* program; /* standard library name, or text */
  int from_text;
  int batch, heads_q, heads_kv, seq_q, seq_kv, dim;
  tj_dtype dtype;
  int permuted_q; /* q in [B, S, H, D] memory, passed as a strided view */
  double tol;
} attention_case;

/* The masks and score mods of the programs the cases run. */
typedef struct program_values {
  const int32_t* doc; /* [B][S] */
  int seq;
  double cap;
  int window;
} program_values;

static int causal_mask(const void* ctx, int b, int h, int q, int kv) {
  (void)ctx, (void)b, (void)h;
  return q >= kv;
}
static int doc_causal_mask(const void* ctx, int b, int h, int q, int kv) {
  const program_values* v = ctx;
  (void)h;
  return v->doc[b * v->seq + q] == v->doc[b * v->seq + kv] && q >= kv;
}
static int window_mask(const void* ctx, int b, int h, int q, int kv) {
  const program_values* v = ctx;
  (void)b, (void)h;
  return q >= kv && q - kv < v->window;
}
static double softcap(const void* ctx, double s) {
  const program_values* v = ctx;
  return v->cap * tanh(s / v->cap);
}
static double softcap_grad(const void* ctx, double s) {
  const program_values* v = ctx;
  const double t = tanh(s / v->cap);
  return 1 - t * t;
}

/* Host memory of one tensor: values as the API sees them (f32 or bf16 bits) and in fp64. */
typedef struct host_array {
  size_t n;
  float* f32;
  uint16_t* bf16;
  double* f64;
} host_array;

static host_array array_new(size_t n) {
  host_array a = {n, calloc(n, sizeof(float)), calloc(n, sizeof(uint16_t)),
                  calloc(n, sizeof(double))};
  return a;
}
static void array_free(host_array* a) {
  free(a->f32);
  free(a->bf16);
  free(a->f64);
}
/* Random values, rounded to `dtype` (the fp64 copy holds the rounded values). */
static void array_random(host_array* a, tj_dtype dtype) {
  for (size_t i = 0; i < a->n; ++i) {
    float f = (float)rng_uniform(-1, 1);
    a->bf16[i] = f32_to_bf16(f);
    if (dtype == TJ_DTYPE_BF16) f = bf16_to_f32(a->bf16[i]);
    a->f32[i] = f;
    a->f64[i] = f;
  }
}
static void array_poison(host_array* a) {
  poison(a->f32, a->n);
  for (size_t i = 0; i < a->n; ++i) a->bf16[i] = 0x7fc1; /* a bf16 NaN */
}
static void* array_data(host_array* a, tj_dtype dtype) {
  return dtype == TJ_DTYPE_BF16 ? (void*)a->bf16 : (void*)a->f32;
}
/* The values as floats (bf16 widened). */
static const float* array_values(host_array* a, tj_dtype dtype) {
  if (dtype == TJ_DTYPE_BF16)
    for (size_t i = 0; i < a->n; ++i) a->f32[i] = bf16_to_f32(a->bf16[i]);
  return a->f32;
}

/* Counts of full / partial / empty tiles of a mask over (b, h) extents, element by element. */
static void brute_force_counts(const ref_attention* r, int batch, int heads, int block_q,
                               int block_kv, int64_t counts[3]) {
  counts[0] = counts[1] = counts[2] = 0;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (int q0 = 0; q0 < r->seq_q; q0 += block_q)
        for (int k0 = 0; k0 < r->seq_kv; k0 += block_kv) {
          int kept = 0, total = 0;
          for (int q = q0; q < q0 + block_q && q < r->seq_q; ++q)
            for (int kv = k0; kv < k0 + block_kv && kv < r->seq_kv; ++kv, ++total)
              kept += r->mask(r->ctx, b, h, q, kv) != 0;
          counts[kept == total ? 0 : kept == 0 ? 2 : 1]++;
        }
}

static void run_attention_case(const attention_case* c, const program_values* values,
                               ref_attention* ref) {
  fprintf(stderr, "attention %s: B %d Hq %d Hkv %d Sq %d Skv %d D %d %s%s\n", c->label, c->batch,
          c->heads_q, c->heads_kv, c->seq_q, c->seq_kv, c->dim,
          c->dtype == TJ_DTYPE_BF16 ? "bf16" : "f32", c->permuted_q ? " permuted q" : "");
  tj_program* prog = NULL;
  EXPECT_OK(c->from_text ? tj_program_from_text(c->program, NULL, &prog)
                         : tj_program_from_stdlib(c->program, &prog));
  tj_bindings* bind = NULL;
  EXPECT_OK(tj_bindings_create(&bind));
  int64_t doc_shape[2] = {c->batch, c->seq_q};
  tj_tensor doc = host_tensor((void*)values->doc, TJ_DTYPE_I32, 2, doc_shape, NULL);
  if (values->doc) EXPECT_OK(tj_bindings_set_buffer(bind, "doc", &doc));
  if (values->cap > 0) EXPECT_OK(tj_bindings_set_f32(bind, "cap", (float)values->cap));
  if (values->window > 0) EXPECT_OK(tj_bindings_set_i32(bind, "window", values->window));

  const size_t nq = (size_t)c->batch * c->heads_q * c->seq_q * c->dim;
  const size_t nk = (size_t)c->batch * c->heads_kv * c->seq_kv * c->dim;
  const size_t nl = (size_t)c->batch * c->heads_q * c->seq_q;
  host_array q = array_new(nq), k = array_new(nk), v = array_new(nk), d_out = array_new(nq);
  host_array out = array_new(nq), dq = array_new(nq), dk = array_new(nk), dv = array_new(nk);
  float* lse = malloc(sizeof(float) * nl);
  array_random(&q, c->dtype);
  array_random(&k, c->dtype);
  array_random(&v, c->dtype);
  array_random(&d_out, c->dtype);

  /* q's memory in [B, S, H, D] order when permuted: element (b, h, s, d) at the strides below. */
  host_array q_mem = array_new(nq);
  const int64_t q_strides[4] = {(int64_t)c->seq_q * c->heads_q * c->dim, c->dim,
                                (int64_t)c->heads_q * c->dim, 1};
  for (int b = 0; b < c->batch; ++b)
    for (int h = 0; h < c->heads_q; ++h)
      for (int s = 0; s < c->seq_q; ++s)
        for (int d = 0; d < c->dim; ++d) {
          size_t from = (((size_t)b * c->heads_q + h) * c->seq_q + s) * c->dim + d;
          size_t to = c->permuted_q
                          ? (size_t)(b * q_strides[0] + h * q_strides[1] + s * q_strides[2] + d)
                          : from;
          q_mem.f32[to] = q.f32[from];
          q_mem.bf16[to] = q.bf16[from];
        }

  const int64_t q_shape[4] = {c->batch, c->heads_q, c->seq_q, c->dim};
  const int64_t kv_shape[4] = {c->batch, c->heads_kv, c->seq_kv, c->dim};
  const int64_t lse_shape[3] = {c->batch, c->heads_q, c->seq_q};
  tj_tensor tq = host_tensor(array_data(&q_mem, c->dtype), c->dtype, 4, q_shape,
                             c->permuted_q ? q_strides : NULL);
  tj_tensor tk = host_tensor(array_data(&k, c->dtype), c->dtype, 4, kv_shape, NULL);
  tj_tensor tv = host_tensor(array_data(&v, c->dtype), c->dtype, 4, kv_shape, NULL);
  tj_tensor t_out = host_tensor(array_data(&out, c->dtype), c->dtype, 4, q_shape, NULL);
  tj_tensor t_lse = host_tensor(lse, TJ_DTYPE_F32, 3, lse_shape, NULL);
  tj_tensor t_dout = host_tensor(array_data(&d_out, c->dtype), c->dtype, 4, q_shape, NULL);
  tj_tensor t_dq = host_tensor(array_data(&dq, c->dtype), c->dtype, 4, q_shape, NULL);
  tj_tensor t_dk = host_tensor(array_data(&dk, c->dtype), c->dtype, 4, kv_shape, NULL);
  tj_tensor t_dv = host_tensor(array_data(&dv, c->dtype), c->dtype, 4, kv_shape, NULL);

  /* The fp64 reference. */
  double* ref_out = malloc(sizeof(double) * nq);
  double* ref_lse = malloc(sizeof(double) * nl);
  double* ref_dq = malloc(sizeof(double) * nq);
  double* ref_dk = malloc(sizeof(double) * nk);
  double* ref_dv = malloc(sizeof(double) * nk);
  ref->batch = c->batch, ref->heads_q = c->heads_q, ref->heads_kv = c->heads_kv;
  ref->seq_q = c->seq_q, ref->seq_kv = c->seq_kv, ref->dim = c->dim;
  ref->scale = 1.0 / sqrt((double)c->dim);
  ref->ctx = values;
  ref_attention_forward(ref, q.f64, k.f64, v.f64, ref_out, ref_lse);
  ref_attention_backward(ref, q.f64, k.f64, v.f64, d_out.f64, ref_dq, ref_dk, ref_dv);

  /* A block mask with small tiles, its counts against the brute force over its extents. */
  tj_block_mask_shape shape = {c->batch, c->heads_q, c->seq_q, c->seq_kv, 16, 8};
  tj_block_mask* mask = NULL;
  EXPECT_OK(tj_block_mask_create(prog, bind, &shape, NULL, &mask));
  tj_block_mask_shape extents;
  int64_t counts[3], want[3];
  EXPECT_OK(tj_block_mask_get_shape(mask, &extents));
  EXPECT_OK(tj_block_mask_counts(mask, &counts[0], &counts[1], &counts[2]));
  CHECK(extents.seq_q == c->seq_q && extents.seq_kv == c->seq_kv);
  CHECK(extents.block_q == 16 && extents.block_kv == 8);
  CHECK(extents.heads == 1); /* no program here reads h */
  CHECK(extents.batch == (values->doc ? c->batch : 1));
  brute_force_counts(ref, extents.batch, extents.heads, 16, 8, want);
  /* Index-only masks classify exactly; document masks soundly (full and empty are promises). */
  if (values->doc) {
    CHECK(counts[0] <= want[0] && counts[2] <= want[2]);
    CHECK(counts[0] + counts[1] + counts[2] == want[0] + want[1] + want[2]);
  } else {
    CHECK(counts[0] == want[0] && counts[1] == want[1] && counts[2] == want[2]);
  }

  /* Forward with the block mask, then without one (built per call) and without lse. */
  array_poison(&out);
  poison(lse, nl);
  EXPECT_OK(tj_attention_forward(prog, &tq, &tk, &tv, bind, mask, NULL, &t_out, &t_lse, NULL));
  EXPECT_CLOSE("out", array_values(&out, c->dtype), ref_out, nq, c->tol);
  EXPECT_CLOSE("lse", lse, ref_lse, nl, c->tol);
  array_poison(&out);
  EXPECT_OK(tj_attention_forward(prog, &tq, &tk, &tv, bind, NULL, NULL, &t_out, NULL, NULL));
  EXPECT_CLOSE("out (no block mask, no lse)", array_values(&out, c->dtype), ref_out, nq, c->tol);

  /* Backward from the forward's out and lse. */
  array_poison(&out);
  EXPECT_OK(tj_attention_forward(prog, &tq, &tk, &tv, bind, mask, NULL, &t_out, &t_lse, NULL));
  array_poison(&dq);
  array_poison(&dk);
  array_poison(&dv);
  tj_attention_options options = {0};
  options.deterministic = 1;
  EXPECT_OK(tj_attention_backward(prog, &tq, &tk, &tv, &t_out, &t_lse, &t_dout, bind, mask,
                                  &options, &t_dq, &t_dk, &t_dv, NULL));
  EXPECT_CLOSE("dq", array_values(&dq, c->dtype), ref_dq, nq, c->tol);
  EXPECT_CLOSE("dk", array_values(&dk, c->dtype), ref_dk, nk, c->tol);
  EXPECT_CLOSE("dv", array_values(&dv, c->dtype), ref_dv, nk, c->tol);

  /* An explicit scale: the reference with the same scale. */
  options.has_scale = 1;
  options.scale = 0.37f;
  ref->scale = 0.37f;
  ref_attention_forward(ref, q.f64, k.f64, v.f64, ref_out, ref_lse);
  array_poison(&out);
  EXPECT_OK(tj_attention_forward(prog, &tq, &tk, &tv, bind, mask, &options, &t_out, &t_lse, NULL));
  EXPECT_CLOSE("out (scale 0.37)", array_values(&out, c->dtype), ref_out, nq, c->tol);

  tj_block_mask_destroy(mask);
  tj_bindings_destroy(bind);
  tj_program_destroy(prog);
  host_array* arrays[] = {&q, &k, &v, &d_out, &out, &dq, &dk, &dv, &q_mem};
  for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; ++i) array_free(arrays[i]);
  free(lse);
  free(ref_out);
  free(ref_lse);
  free(ref_dq);
  free(ref_dk);
  free(ref_dv);
}

void test_attention(void) {
  program_values none = {NULL, 0, 0, 0};
  ref_attention causal = {0};
  causal.mask = causal_mask;
  attention_case a = {"causal (text)",
                      "attention causal_text {\n  mask = q >= kv\n}\n",
                      1,
                      2,
                      4,
                      2,
                      37,
                      37,
                      16,
                      TJ_DTYPE_F32,
                      1,
                      2e-4};
  run_attention_case(&a, &none, &causal);

  /* Sorted document ids per batch entry: a few documents of random lengths. */
  enum { kBatch = 2, kSeq = 29 };
  int32_t doc[kBatch * kSeq];
  for (int b = 0; b < kBatch; ++b) {
    int id = 0;
    for (int s = 0; s < kSeq; ++s) {
      if (s > 0 && rng_below(6) == 0) ++id;
      doc[b * kSeq + s] = id;
    }
  }
  program_values docs = {doc, kSeq, 0.8, 0};
  ref_attention doc_softcap = {0};
  doc_softcap.mask = doc_causal_mask;
  doc_softcap.score = softcap;
  doc_softcap.score_grad = softcap_grad;
  attention_case b = {"doc_softcap", "doc_softcap", 0, kBatch,       2, 1,
                      kSeq,          kSeq,          8, TJ_DTYPE_F32, 0, 2e-4};
  run_attention_case(&b, &docs, &doc_softcap);

  program_values window = {NULL, 0, 0, 5};
  ref_attention sliding = {0};
  sliding.mask = window_mask;
  attention_case c = {
      "sliding_window", "sliding_window", 0, 1, 2, 2, 33, 33, 32, TJ_DTYPE_BF16, 1, 3e-2};
  run_attention_case(&c, &window, &sliding);
}

int main(void) {
  uint64_t seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
  const char* env = getenv("TILEJIT_TEST_SEED");
  if (env) seed = strtoull(env, NULL, 10);
  fprintf(stderr, "seed %llu (TILEJIT_TEST_SEED repeats this run)\n", (unsigned long long)seed);
  rng_seed(seed);

  test_programs();
  test_attention();
  test_linear_ce();
  test_errors();

  if (g_failures) {
    fprintf(stderr, "%d check(s) failed (seed %llu)\n", g_failures, (unsigned long long)seed);
    return 1;
  }
  fprintf(stderr, "all C ABI checks passed\n");
  return 0;
}
