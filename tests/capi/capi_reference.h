/* Brute-force fp64 references for the C ABI test, written from the semantics in DESIGN.md:
 * attention materialises every score, the loss every logit. Arrays are contiguous:
 * q, out [B][Hq][Sq][D]; k, v [B][Hkv][Skv][D]; lse [B][Hq][Sq]; hidden [N][D]. */
#ifndef TILEJIT_CAPI_REFERENCE_H
#define TILEJIT_CAPI_REFERENCE_H

#include <stdint.h>

/* The program: mask(b, h, q, kv) and score(s, ...) with its derivative (NULL: identity). */
typedef struct ref_attention {
  int batch, heads_q, heads_kv, seq_q, seq_kv, dim;
  double scale;
  int (*mask)(const void* ctx, int b, int h, int q, int kv);
  double (*score)(const void* ctx, double s);
  double (*score_grad)(const void* ctx, double s);
  const void* ctx;
} ref_attention;

void ref_attention_forward(const ref_attention* p, const double* q, const double* k,
                           const double* v, double* out, double* lse);
void ref_attention_backward(const ref_attention* p, const double* q, const double* k,
                            const double* v, const double* d_out, double* dq, double* dk,
                            double* dv);

/* A vocabulary segment: global ids [begin, begin + size), weight [size][D], bias [size] or NULL. */
typedef struct ref_segment {
  int64_t begin, size;
  const double* weight;
  const double* bias;
} ref_segment;

/* Cross-entropy over the live ids with logit_mod cap * tanh(logit / cap) (cap 0: none), label
 * smoothing, z-loss, ignore_index and optionally KL against a teacher (kl_alpha 0: none),
 * row = (1 - alpha) CE + z_loss lse^2 + alpha T^2 KL(p_t || p_s) with p = softmax(logits / T);
 * the teacher's logits come from teacher_hidden [N][teacher_dim] through its own layout over
 * the same live ids, and the same logit_mod. Reduction mean over the kept rows. */
typedef struct ref_loss {
  int64_t rows, dim;
  int num_segments;
  const ref_segment* segments;
  double cap, label_smoothing, z_loss;
  int64_t ignore_index;
  double kl_alpha, kl_temperature;
  const double* teacher_hidden;
  int64_t teacher_dim;
  int num_teacher_segments;
  const ref_segment* teacher_segments;
} ref_loss;

/* Returns the mean loss; row_loss and lse [N] (0 on ignored rows). */
double ref_loss_forward(const ref_loss* p, const double* hidden, const int64_t* targets,
                        double* row_loss, double* lse);
/* Gradients of grad_loss * loss: d_hidden [N][D], d_weight[s] [size][D], d_bias[s] [size]
 * (segments with a bias). */
void ref_loss_backward(const ref_loss* p, const double* hidden, const int64_t* targets,
                       double grad_loss, double* d_hidden, double* const* d_weight,
                       double* const* d_bias);

#endif
