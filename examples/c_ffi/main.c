/* tilejit from C: a document-masked, soft-capped causal attention program written in the text
 * form, its captured buffer and param bound by name, a block mask built once, attention
 * forward and backward, then a fused linear cross-entropy over a two-segment vocabulary. The
 * tensors are host memory, so everything runs on the CPU backend; with a GPU, the same calls
 * take device pointers (tj_tensor.device = the CUDA ordinal, bf16 or f16, head dim 64 or 128)
 * and a CUstream. The attention output and the loss are checked against direct fp64
 * computations; the exit code is non-zero when one is off. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "tilejit.h"

/* Every tj_ call returns a status; on failure tj_last_error() says what and where. */
#define TJ_TRY(call)                                                                           \
  do {                                                                                         \
    tj_status status_ = (call);                                                                \
    if (status_ != TJ_OK) {                                                                    \
      fprintf(stderr, "%s failed: %s\n%s\n", #call, tj_status_name(status_), tj_last_error()); \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

enum { B = 1, H = 2, S = 24, D = 16 };

static const char* kAttention =
    "attention doc_softcap {\n"
    "  buffer doc : i32[B, S]\n"
    "  param cap : f32\n"
    "  mask = doc[b, q] == doc[b, kv] && q >= kv\n"
    "  score = cap * tanh(score / cap)\n"
    "}\n";

static float frand(void) { return (float)rand() / (float)RAND_MAX * 2.0f - 1.0f; }

/* out[b, h, i, :] by brute force in fp64, for the check. */
static double attention_at(const float* q, const float* k, const float* v, const int32_t* doc,
                           float cap, int h, int i, int d) {
  double m = -INFINITY, sum = 0, acc = 0, s[S];
  for (int j = 0; j <= i; ++j) {
    if (doc[j] != doc[i]) continue;
    double dot = 0;
    for (int e = 0; e < D; ++e) dot += (double)q[(h * S + i) * D + e] * k[(h * S + j) * D + e];
    s[j] = cap * tanh(dot / sqrt((double)D) / cap);
    if (s[j] > m) m = s[j];
  }
  for (int j = 0; j <= i; ++j) {
    if (doc[j] != doc[i]) continue;
    sum += exp(s[j] - m);
    acc += exp(s[j] - m) * v[(h * S + j) * D + d];
  }
  return acc / sum;
}

static int run_attention(void) {
  static float q[B * H * S * D], k[B * H * S * D], v[B * H * S * D], out[B * H * S * D],
      lse[B * H * S], d_out[B * H * S * D], dq[B * H * S * D], dk[B * H * S * D], dv[B * H * S * D];
  int32_t doc[B * S];
  for (int i = 0; i < B * H * S * D; ++i) q[i] = frand(), k[i] = frand(), v[i] = frand();
  for (int i = 0; i < B * H * S * D; ++i) d_out[i] = frand();
  for (int s = 0; s < S; ++s) doc[s] = s < 10 ? 0 : s < 17 ? 1 : 2; /* three packed documents */

  tj_program* program = NULL;
  TJ_TRY(tj_program_from_text(kAttention, "doc_softcap.tj", &program));
  const char* hash = NULL;
  TJ_TRY(tj_program_hash(program, &hash));
  printf("program doc_softcap, hash %.16s...\n", hash);

  const float cap = 2.0f;
  const int64_t doc_shape[2] = {B, S};
  tj_tensor doc_t = {doc, TJ_DTYPE_I32, 2, doc_shape, NULL, TJ_HOST};
  tj_bindings* bind = NULL;
  TJ_TRY(tj_bindings_create(&bind));
  TJ_TRY(tj_bindings_set_buffer(bind, "doc", &doc_t));
  TJ_TRY(tj_bindings_set_f32(bind, "cap", cap));

  /* Built once from the program, reused by forward and backward (and across layers). */
  tj_block_mask_shape shape = {B, H, S, S, 8, 8};
  tj_block_mask* mask = NULL;
  int64_t full, partial, empty;
  TJ_TRY(tj_block_mask_create(program, bind, &shape, NULL, &mask));
  TJ_TRY(tj_block_mask_counts(mask, &full, &partial, &empty));
  printf("block mask: %lld full, %lld partial, %lld empty tiles\n", (long long)full,
         (long long)partial, (long long)empty);

  const int64_t x_shape[4] = {B, H, S, D}, lse_shape[3] = {B, H, S};
  tj_tensor tq = {q, TJ_DTYPE_F32, 4, x_shape, NULL, TJ_HOST};
  tj_tensor tk = {k, TJ_DTYPE_F32, 4, x_shape, NULL, TJ_HOST};
  tj_tensor tv = {v, TJ_DTYPE_F32, 4, x_shape, NULL, TJ_HOST};
  tj_tensor to = {out, TJ_DTYPE_F32, 4, x_shape, NULL, TJ_HOST};
  tj_tensor tl = {lse, TJ_DTYPE_F32, 3, lse_shape, NULL, TJ_HOST};
  tj_tensor tdo = {d_out, TJ_DTYPE_F32, 4, x_shape, NULL, TJ_HOST};
  tj_tensor tdq = {dq, TJ_DTYPE_F32, 4, x_shape, NULL, TJ_HOST};
  tj_tensor tdk = {dk, TJ_DTYPE_F32, 4, x_shape, NULL, TJ_HOST};
  tj_tensor tdv = {dv, TJ_DTYPE_F32, 4, x_shape, NULL, TJ_HOST};
  TJ_TRY(tj_attention_forward(program, &tq, &tk, &tv, bind, mask, NULL, &to, &tl, NULL));
  TJ_TRY(tj_attention_backward(program, &tq, &tk, &tv, &to, &tl, &tdo, bind, mask, NULL, &tdq, &tdk,
                               &tdv, NULL));

  double worst = 0, dq_norm = 0;
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < S; ++i)
      for (int d = 0; d < D; ++d) {
        double err = fabs(out[(h * S + i) * D + d] - attention_at(q, k, v, doc, cap, h, i, d));
        if (!(err <= worst)) worst = err;
      }
  for (int i = 0; i < B * H * S * D; ++i) dq_norm += (double)dq[i] * dq[i];
  printf("attention forward: max |out - fp64| = %.2e; backward: |dq| = %.4f\n", worst,
         sqrt(dq_norm));

  /* A mistake is a status and a message naming the program and the tensor. */
  tj_tensor wrong = tk;
  wrong.dtype = TJ_DTYPE_I32;
  tj_status status =
      tj_attention_forward(program, &tq, &wrong, &tv, bind, mask, NULL, &to, &tl, NULL);
  printf("a k of dtype i32 gives %s: %s\n", tj_status_name(status), tj_last_error());

  tj_block_mask_destroy(mask);
  tj_bindings_destroy(bind);
  tj_program_destroy(program);
  return worst < 1e-4 && status == TJ_ERR_INVALID_ARGUMENT;
}

enum { N = 8, E = 16, V0 = 32, V1 = 8, GAP = 5 };

static int run_loss(void) {
  static float hidden[N * E], w0[V0 * E], w1[V1 * E], loss;
  int32_t targets[N];
  for (int i = 0; i < N * E; ++i) hidden[i] = frand();
  for (int i = 0; i < V0 * E; ++i) w0[i] = 0.3f * frand();
  for (int i = 0; i < V1 * E; ++i) w1[i] = 0.3f * frand();
  for (int r = 0; r < N; ++r) targets[r] = r % 3 == 0 ? V0 + GAP + r : r * 3; /* live ids */

  /* Ids [V0, V0 + GAP) are dead: never a target, nothing in the log-sum-exp. */
  char text[256];
  snprintf(text, sizeof text,
           "loss two_heads {\n  segment base : [0, %d) weight W0\n"
           "  segment extra : [%d, %d) weight W1\n}\n",
           V0, V0 + GAP, V0 + GAP + V1);
  tj_program* program = NULL;
  TJ_TRY(tj_program_from_text(text, NULL, &program));
  const int64_t h_shape[2] = {N, E}, t_shape[1] = {N}, w0_shape[2] = {V0, E}, w1_shape[2] = {V1, E},
                one[1] = {1};
  tj_tensor th = {hidden, TJ_DTYPE_F32, 2, h_shape, NULL, TJ_HOST};
  tj_tensor tt = {targets, TJ_DTYPE_I32, 1, t_shape, NULL, TJ_HOST};
  tj_tensor tw0 = {w0, TJ_DTYPE_F32, 2, w0_shape, NULL, TJ_HOST};
  tj_tensor tw1 = {w1, TJ_DTYPE_F32, 2, w1_shape, NULL, TJ_HOST};
  tj_tensor tloss = {&loss, TJ_DTYPE_F32, 1, one, NULL, TJ_HOST};
  tj_segment_tensors segments[2] = {{&tw0, NULL}, {&tw1, NULL}};
  tj_linear_ce_inputs in = {&th, &tt, segments, 2, NULL};
  tj_linear_ce_outputs outs = {&tloss, NULL, NULL, NULL, 0};
  tj_linear_ce_state* state = NULL;
  TJ_TRY(tj_linear_ce_forward(program, &in, NULL, NULL, &outs, NULL, &state));

  double want = 0;
  for (int r = 0; r < N; ++r) {
    double logits[V0 + V1], m = -INFINITY, sum = 0, target = 0;
    for (int j = 0; j < V0 + V1; ++j) {
      const float* w = j < V0 ? &w0[j * E] : &w1[(j - V0) * E];
      logits[j] = 0;
      for (int e = 0; e < E; ++e) logits[j] += (double)hidden[r * E + e] * w[e];
      if (logits[j] > m) m = logits[j];
      if ((j < V0 ? j : j + GAP) == targets[r]) target = logits[j];
    }
    for (int j = 0; j < V0 + V1; ++j) sum += exp(logits[j] - m);
    want += (m + log(sum) - target) / N;
  }
  printf("linear cross-entropy: loss %.6f (fp64: %.6f)\n", loss, want);
  tj_linear_ce_state_destroy(state);
  tj_program_destroy(program);
  return fabs(loss - want) < 1e-4 * (1 + fabs(want));
}

int main(void) {
  printf("tilejit %s through the C ABI (GPU %s)\n", tj_version(),
         tj_gpu_available() ? "present; this example stays on the host" : "absent");
  srand(7);
  const int ok = run_attention() & run_loss();
  printf(ok ? "all results match\n" : "MISMATCH\n");
  return ok ? 0 : 1;
}
