/* Every error path of the C ABI: each bad call returns its status with a non-empty message that
 * names what is at fault, and a good call right after it still works (and clears the
 * message). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"
#include "tilejit.h"

enum { B = 1, H = 2, S = 9, D = 8, N = 6, V = 10 };

static float q[B * H * S * D], k[B * H * S * D], v[B * H * S * D], out[B * H * S * D],
    lse[B * H * S], d_out[B * H * S * D], dq[B * H * S * D], dk[B * H * S * D], dv[B * H * S * D];
static uint16_t q16[B * H * S * D];
static const int64_t kShape[4] = {B, H, S, D}, kLseShape[3] = {B, H, S};

static tj_tensor t4(float* data) { return host_tensor(data, TJ_DTYPE_F32, 4, kShape, NULL); }

/* A forward that must work: after every failure, the library is still usable. */
static void good_forward(const tj_program* causal) {
  tj_tensor tq = t4(q), tk = t4(k), tv = t4(v), to = t4(out);
  tj_tensor tl = host_tensor(lse, TJ_DTYPE_F32, 3, kLseShape, NULL);
  poison(out, sizeof out / sizeof out[0]);
  EXPECT_OK(tj_attention_forward(causal, &tq, &tk, &tv, NULL, NULL, NULL, &to, &tl, NULL));
  /* Row 0 sees only kv 0: its output is v's row 0. */
  for (int d = 0; d < D; ++d) CHECK(fabsf(out[d] - v[d]) < 1e-5f);
}

static void program_errors(const tj_program* causal) {
  tj_program* p = (tj_program*)1; /* must be reset to NULL on failure */
  EXPECT_ERROR(tj_program_from_text(NULL, NULL, &p), TJ_ERR_INVALID_ARGUMENT, "text is NULL");
  CHECK(p == NULL);
  EXPECT_ERROR(tj_program_from_text("attention a {\n}\n", NULL, NULL), TJ_ERR_INVALID_ARGUMENT,
               "'out'");
  good_forward(causal);
  /* Parse errors carry file:line:col and the line. */
  EXPECT_ERROR(tj_program_from_text("attention a {\n  mask = dco[b, q] == 1\n}\n", "bad.tj", &p),
               TJ_ERR_PARSE, "bad.tj:2:10: unknown name 'dco'");
  CHECK(p == NULL);
  EXPECT_ERROR(tj_program_from_text("loss l {\n  segment a : [10, 0) weight W\n}\n", NULL, &p),
               TJ_ERR_PARSE, "<input>:2:20");
  good_forward(causal);
  EXPECT_ERROR(tj_program_from_stdlib("no_such_program", &p), TJ_ERR_INVALID_ARGUMENT,
               "no_such_program");
  EXPECT_ERROR(tj_program_from_stdlib(NULL, &p), TJ_ERR_INVALID_ARGUMENT, "name is NULL");
  const char* text = NULL;
  EXPECT_ERROR(tj_program_text(NULL, &text), TJ_ERR_INVALID_ARGUMENT, "program is NULL");
  EXPECT_ERROR(tj_program_hash(causal, NULL), TJ_ERR_INVALID_ARGUMENT, "'out'");
  int32_t count = 0;
  EXPECT_ERROR(tj_program_segment_count(causal, &count), TJ_ERR_INVALID_ARGUMENT,
               "program 'causal' is an attention program");
  tj_reduction reduction = TJ_REDUCTION_NONE;
  EXPECT_ERROR(tj_program_reduction(causal, &reduction), TJ_ERR_INVALID_ARGUMENT,
               "program 'causal' is an attention program");
  EXPECT_ERROR(tj_program_reduction(NULL, &reduction), TJ_ERR_INVALID_ARGUMENT,
               "program is NULL");
  tj_segment_info seg;
  EXPECT_ERROR(tj_program_segment(causal, 0, &seg), TJ_ERR_INVALID_ARGUMENT,
               "program 'causal' is an attention program");
  tj_program* loss = NULL;
  EXPECT_OK(tj_program_from_stdlib("two_segments", &loss));
  EXPECT_ERROR(tj_program_reduction(loss, NULL), TJ_ERR_INVALID_ARGUMENT, "'reduction'");
  EXPECT_ERROR(tj_program_segment(loss, 2, &seg), TJ_ERR_INVALID_ARGUMENT,
               "program 'two_segments' has 2 segment(s): index 2 is out of range");
  EXPECT_ERROR(tj_program_segment(loss, -1, &seg), TJ_ERR_INVALID_ARGUMENT, "index -1");
  EXPECT_ERROR(tj_program_segment(loss, 0, NULL), TJ_ERR_INVALID_ARGUMENT, "'info'");
  tj_program_destroy(loss);
  good_forward(causal);
}

static void binding_errors(const tj_program* doc_softcap) {
  tj_bindings* bind = NULL;
  EXPECT_ERROR(tj_bindings_create(NULL), TJ_ERR_INVALID_ARGUMENT, "'out'");
  EXPECT_OK(tj_bindings_create(&bind));
  int32_t doc[B * S] = {0};
  const int64_t doc_shape[2] = {B, S};
  tj_tensor td = host_tensor(doc, TJ_DTYPE_I32, 2, doc_shape, NULL);
  EXPECT_ERROR(tj_bindings_set_buffer(NULL, "doc", &td), TJ_ERR_INVALID_ARGUMENT,
               "bindings are NULL");
  EXPECT_ERROR(tj_bindings_set_buffer(bind, NULL, &td), TJ_ERR_INVALID_ARGUMENT, "name is NULL");
  EXPECT_ERROR(tj_bindings_set_buffer(bind, "", &td), TJ_ERR_INVALID_ARGUMENT, "name is empty");
  EXPECT_ERROR(tj_bindings_set_buffer(bind, "doc", NULL), TJ_ERR_INVALID_ARGUMENT,
               "tensor 'doc' is NULL");
  EXPECT_ERROR(tj_bindings_set_f32(NULL, "cap", 1.0f), TJ_ERR_INVALID_ARGUMENT, "NULL");

  tj_tensor tq = t4(q), tk = t4(k), tv = t4(v), to = t4(out);
  /* Unbound buffer, then unbound param. */
  EXPECT_OK(tj_bindings_set_f32(bind, "cap", 20.0f));
  EXPECT_ERROR(tj_attention_forward(doc_softcap, &tq, &tk, &tv, bind, NULL, NULL, &to, NULL, NULL),
               TJ_ERR_INVALID_ARGUMENT, "'doc'");
  EXPECT_OK(tj_bindings_set_buffer(bind, "doc", &td));
  EXPECT_OK(tj_bindings_set_i32(bind, "cap", 20)); /* replaces the f32 */
  EXPECT_OK(tj_bindings_set_f32(bind, "cap", 20.0f));
  EXPECT_OK(tj_attention_forward(doc_softcap, &tq, &tk, &tv, bind, NULL, NULL, &to, NULL, NULL));
  /* An unknown name. */
  EXPECT_OK(tj_bindings_set_f32(bind, "not_in_program", 1.0f));
  EXPECT_ERROR(tj_attention_forward(doc_softcap, &tq, &tk, &tv, bind, NULL, NULL, &to, NULL, NULL),
               TJ_ERR_INVALID_ARGUMENT, "not_in_program");
  tj_bindings_destroy(bind);

  /* A buffer bound with the wrong dtype, with the wrong rank. */
  EXPECT_OK(tj_bindings_create(&bind));
  EXPECT_OK(tj_bindings_set_f32(bind, "cap", 20.0f));
  tj_tensor wrong = host_tensor(q, TJ_DTYPE_F32, 2, doc_shape, NULL);
  EXPECT_OK(tj_bindings_set_buffer(bind, "doc", &wrong));
  EXPECT_ERROR(tj_attention_forward(doc_softcap, &tq, &tk, &tv, bind, NULL, NULL, &to, NULL, NULL),
               TJ_ERR_INVALID_ARGUMENT, "buffer 'doc' is declared i32[B, S]");
  tj_tensor rank1 = host_tensor(doc, TJ_DTYPE_I32, 1, doc_shape + 1, NULL);
  EXPECT_OK(tj_bindings_set_buffer(bind, "doc", &rank1));
  EXPECT_ERROR(
      tj_block_mask_create(doc_softcap, bind, &(tj_block_mask_shape){B, H, S, S, 0, 0}, NULL, NULL),
      TJ_ERR_INVALID_ARGUMENT, "'out'");
  tj_block_mask* mask = NULL;
  EXPECT_ERROR(tj_block_mask_create(doc_softcap, bind, &(tj_block_mask_shape){B, H, S, S, 0, 0},
                                    NULL, &mask),
               TJ_ERR_INVALID_ARGUMENT, "rank");
  CHECK(mask == NULL);
  tj_bindings_destroy(bind);
  /* An f32 param bound to an i32 value is converted; an i32 param bound to a float is not. */
  tj_program* window = NULL;
  EXPECT_OK(tj_program_from_stdlib("sliding_window", &window));
  EXPECT_OK(tj_bindings_create(&bind));
  EXPECT_OK(tj_bindings_set_f32(bind, "window", 3.0f));
  EXPECT_ERROR(tj_attention_forward(window, &tq, &tk, &tv, bind, NULL, NULL, &to, NULL, NULL),
               TJ_ERR_INVALID_ARGUMENT, "'window'");
  tj_bindings_destroy(bind);
  tj_program_destroy(window);
}

static void tensor_errors(const tj_program* causal) {
  tj_tensor tq = t4(q), tk = t4(k), tv = t4(v), to = t4(out);
  tj_tensor tl = host_tensor(lse, TJ_DTYPE_F32, 3, kLseShape, NULL);
  EXPECT_ERROR(tj_attention_forward(NULL, &tq, &tk, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "program is NULL");
  EXPECT_ERROR(tj_attention_forward(causal, NULL, &tk, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'q' is NULL");
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'out' is NULL");
  good_forward(causal);

  tj_tensor bad = tk;
  bad.dtype = 42;
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &bad, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'k' has dtype code 42");
  bad = tv;
  bad.ndim = -1;
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &tk, &bad, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'v' has ndim -1");
  bad.ndim = TJ_MAX_NDIM + 1;
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &tk, &bad, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'v' has ndim 9");
  bad = tq;
  bad.shape = NULL;
  EXPECT_ERROR(tj_attention_forward(causal, &bad, &tk, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "NULL shape");
  bad = tq;
  bad.device = -2;
  EXPECT_ERROR(tj_attention_forward(causal, &bad, &tk, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "device -2");
  good_forward(causal);

  /* Rank, shape, dtype and stride mismatches, named by the runtime. */
  bad = tq;
  bad.ndim = 3;
  EXPECT_ERROR(tj_attention_forward(causal, &bad, &tk, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'q' must have rank 4");
  const int64_t wide[4] = {B, H, S, D + 1};
  bad = host_tensor(k, TJ_DTYPE_F32, 4, wide, NULL);
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &bad, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'k'");
  const int64_t negative[4] = {B, H, -S, D};
  bad = host_tensor(k, TJ_DTYPE_F32, 4, negative, NULL);
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &bad, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'k': dimension 2 is negative");
  bad = host_tensor(q16, TJ_DTYPE_BF16, 4, kShape, NULL);
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &tk, &bad, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "'v' must have dtype f32");
  const int64_t short_out[4] = {B, H, S - 1, D};
  bad = host_tensor(out, TJ_DTYPE_F32, 4, short_out, NULL);
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &tk, &tv, NULL, NULL, NULL, &bad, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'out'");
  const int64_t column[4] = {H * S * D, S * D, D, 2};
  bad = host_tensor(q, TJ_DTYPE_F32, 4, kShape, column);
  EXPECT_ERROR(tj_attention_forward(causal, &bad, &tk, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "last dimension must be contiguous");
  bad = host_tensor(lse, TJ_DTYPE_F32, 4, kShape, NULL);
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &tk, &tv, NULL, NULL, NULL, &to, &bad, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'lse'");
  tj_attention_options options = {0};
  options.has_scale = 1;
  options.scale = INFINITY;
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &tk, &tv, NULL, NULL, &options, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "scale");
  good_forward(causal);

  /* Backward: every tensor required. */
  tj_tensor tdo = t4(d_out), tdq = t4(dq), tdk = t4(dk), tdv = t4(dv);
  EXPECT_ERROR(tj_attention_backward(causal, &tq, &tk, &tv, &to, NULL, &tdo, NULL, NULL, NULL, &tdq,
                                     &tdk, &tdv, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'lse' is NULL");
  tj_tensor short_dv = host_tensor(dv, TJ_DTYPE_F32, 4, short_out, NULL);
  EXPECT_ERROR(tj_attention_backward(causal, &tq, &tk, &tv, &to, &tl, &tdo, NULL, NULL, NULL, &tdq,
                                     &tdk, &short_dv, NULL),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'dv'");
  EXPECT_OK(tj_attention_backward(causal, &tq, &tk, &tv, &to, &tl, &tdo, NULL, NULL, NULL, &tdq,
                                  &tdk, &tdv, NULL));

  /* Placement: host and device tensors mixed; device tensors with no GPU; what the GPU
   * kernels do not support. */
  tj_tensor on_device = tk;
  on_device.device = 0;
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &on_device, &tv, NULL, NULL, NULL, &to, &tl, NULL),
               TJ_ERR_INVALID_ARGUMENT, "'k' is in device memory");
  const int64_t gpu_shape[4] = {1, 1, 128, 64};
  tj_tensor dev_q = host_tensor(q16, TJ_DTYPE_BF16, 4, gpu_shape, NULL);
  dev_q.device = 0;
  if (!tj_gpu_available())
    EXPECT_ERROR(
        tj_attention_forward(causal, &dev_q, &dev_q, &dev_q, NULL, NULL, NULL, &dev_q, NULL, NULL),
        TJ_ERR_NO_DEVICE, "tensor 'q' is in device memory (device 0) but no GPU");
  tj_tensor dev_f32 = host_tensor(q, TJ_DTYPE_F32, 4, kShape, NULL);
  dev_f32.device = 0;
  EXPECT_ERROR(tj_attention_forward(causal, &dev_f32, &dev_f32, &dev_f32, NULL, NULL, NULL,
                                    &dev_f32, NULL, NULL),
               TJ_ERR_UNSUPPORTED, "not f32 with head dim 8");
  good_forward(causal);
}

static void block_mask_errors(const tj_program* causal, const tj_program* loss) {
  tj_block_mask* mask = NULL;
  tj_block_mask_shape shape = {B, H, S, S, 4, 4};
  EXPECT_ERROR(tj_block_mask_create(causal, NULL, NULL, NULL, &mask), TJ_ERR_INVALID_ARGUMENT,
               "shape is NULL");
  shape.batch = 0;
  EXPECT_ERROR(tj_block_mask_create(causal, NULL, &shape, NULL, &mask), TJ_ERR_INVALID_ARGUMENT,
               "batch (0)");
  shape.batch = B;
  shape.block_kv = -4;
  EXPECT_ERROR(tj_block_mask_create(causal, NULL, &shape, NULL, &mask), TJ_ERR_INVALID_ARGUMENT,
               "block_kv (-4)");
  EXPECT_ERROR(tj_block_mask_create(loss, NULL, &shape, NULL, &mask), TJ_ERR_INVALID_ARGUMENT,
               "program 'two_segments' is a loss program");
  EXPECT_ERROR(tj_block_mask_counts(NULL, NULL, NULL, NULL), TJ_ERR_INVALID_ARGUMENT,
               "block mask is NULL");
  EXPECT_ERROR(tj_block_mask_get_shape(NULL, &shape), TJ_ERR_INVALID_ARGUMENT,
               "block mask is NULL");
  /* A mask built for other sequence lengths. */
  shape.block_kv = 4;
  shape.seq_kv = S + 3;
  EXPECT_OK(tj_block_mask_create(causal, NULL, &shape, NULL, &mask));
  tj_tensor tq = t4(q), tk = t4(k), tv = t4(v), to = t4(out);
  EXPECT_ERROR(tj_attention_forward(causal, &tq, &tk, &tv, NULL, mask, NULL, &to, NULL, NULL),
               TJ_ERR_INVALID_ARGUMENT, "'block_mask' was built for seq_q 9 x seq_kv 12");
  tj_block_mask_destroy(mask);
  /* Wrong program kinds. */
  EXPECT_ERROR(tj_attention_forward(loss, &tq, &tk, &tv, NULL, NULL, NULL, &to, NULL, NULL),
               TJ_ERR_INVALID_ARGUMENT, "program 'two_segments' is a loss program");
  good_forward(causal);
}

static void loss_errors(const tj_program* causal) {
  const char* text =
      "loss err_loss {\n"
      "  segment a : [0, 4) weight W_a\n"
      "  segment b : [6, 10) weight W_b bias b_b\n"
      "}\n";
  tj_program* loss = NULL;
  EXPECT_OK(tj_program_from_text(text, NULL, &loss));
  static float hidden[N * D], w_a[4 * D], w_b[4 * D], b_b[4], row[N], one[1];
  static int32_t targets[N] = {0, 1, 7, -100, 9, 3};
  const int64_t h_shape[2] = {N, D}, w_shape[2] = {4, D}, b_shape[1] = {4}, n_shape[1] = {N},
                one_shape[1] = {1};
  tj_tensor th = host_tensor(hidden, TJ_DTYPE_F32, 2, h_shape, NULL);
  tj_tensor tt = host_tensor(targets, TJ_DTYPE_I32, 1, n_shape, NULL);
  tj_tensor twa = host_tensor(w_a, TJ_DTYPE_F32, 2, w_shape, NULL);
  tj_tensor twb = host_tensor(w_b, TJ_DTYPE_F32, 2, w_shape, NULL);
  tj_tensor tbb = host_tensor(b_b, TJ_DTYPE_F32, 1, b_shape, NULL);
  tj_segment_tensors segs[2] = {{&twa, NULL}, {&twb, &tbb}};
  tj_linear_ce_inputs in = {&th, &tt, segs, 2, NULL};
  tj_linear_ce_state* state = (tj_linear_ce_state*)1;

  EXPECT_ERROR(tj_linear_ce_forward(causal, &in, NULL, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "program 'causal' is an attention program");
  CHECK(state == NULL);
  EXPECT_ERROR(tj_linear_ce_forward(loss, NULL, NULL, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "inputs are NULL");
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, NULL, NULL, NULL, NULL),
               TJ_ERR_INVALID_ARGUMENT, "'state'");
  in.num_segments = 1;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "num_segments is 1");
  in.num_segments = 2;
  segs[0].bias = &tbb;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "segment 'a' has no bias");
  segs[0].bias = NULL;
  tj_bindings* bind = NULL;
  EXPECT_OK(tj_bindings_create(&bind));
  EXPECT_OK(tj_bindings_set_buffer(bind, "W_b", &twb));
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, bind, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "'W_b' is given both");
  tj_bindings_destroy(bind);
  /* From the bindings, one weight missing. */
  EXPECT_OK(tj_bindings_create(&bind));
  EXPECT_OK(tj_bindings_set_buffer(bind, "W_a", &twa));
  EXPECT_OK(tj_bindings_set_buffer(bind, "b_b", &tbb));
  tj_linear_ce_inputs by_name = {&th, &tt, NULL, 0, NULL};
  EXPECT_ERROR(tj_linear_ce_forward(loss, &by_name, bind, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "'W_b' of segment 'b' is not bound");
  tj_bindings_destroy(bind);
  /* A dead id as a target; a weight of the wrong width; an output of the wrong size. */
  targets[2] = 5;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "target 5");
  targets[2] = 7;
  const int64_t narrow[2] = {4, D - 1};
  tj_tensor bad_w = host_tensor(w_a, TJ_DTYPE_F32, 2, narrow, NULL);
  segs[0].weight = &bad_w;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "'W_a'");
  segs[0].weight = &twa;
  tj_tensor short_rows = host_tensor(row, TJ_DTYPE_F32, 1, b_shape, NULL);
  tj_linear_ce_outputs outs = {NULL, &short_rows, NULL, NULL, 0};
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, NULL, &outs, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "tensor 'row_loss'");
  tj_linear_ce_inputs with_teacher = in;
  with_teacher.teacher_hidden = &th;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &with_teacher, NULL, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "'teacher_hidden' is given but the program has no KL");
  tj_linear_ce_options options;
  tj_linear_ce_options_init(&options);
  options.filter_threshold = NAN;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, &options, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "filter_threshold");
  /* The vocabulary order: a known kind, and an order object exactly with TJ_VOCAB_STATE. */
  tj_linear_ce_options_init(&options);
  options.vocab_ordering = 7;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, &options, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "vocab_ordering is 7");
  options.vocab_ordering = TJ_VOCAB_STATE;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, &options, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "vocab_order is NULL");
  tj_vocab_order* order = NULL;
  EXPECT_ERROR(tj_vocab_order_create(0, &order), TJ_ERR_INVALID_ARGUMENT, "refresh_every is 0");
  CHECK(order == NULL);
  EXPECT_ERROR(tj_vocab_order_create(1, NULL), TJ_ERR_INVALID_ARGUMENT, "'order'");
  EXPECT_ERROR(tj_vocab_order_stats(NULL, NULL, NULL, NULL, NULL), TJ_ERR_INVALID_ARGUMENT,
               "vocabulary order is NULL");
  EXPECT_OK(tj_vocab_order_create(2, &order));
  options.vocab_ordering = TJ_VOCAB_AVERAGE_LOGIT;
  options.vocab_order = order;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, &options, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "vocab_order is given");
  tj_vocab_order_destroy(order);
  tj_vocab_order_destroy(NULL);
  /* A caller's order: a permutation per segment, copied. */
  int32_t perm_a[4] = {2, 0, 3, 1}, perm_b[4] = {1, 1, 0, 2};
  const int32_t* perms[2] = {perm_a, perm_b};
  const int64_t perm_sizes[2] = {4, 4};
  EXPECT_ERROR(tj_vocab_order_create_fixed(perms, perm_sizes, 2, &order), TJ_ERR_INVALID_ARGUMENT,
               "segment 1 is not a permutation");
  CHECK(order == NULL);
  EXPECT_ERROR(tj_vocab_order_create_fixed(NULL, perm_sizes, 2, &order), TJ_ERR_INVALID_ARGUMENT,
               "at least one segment");
  perm_b[1] = 3;
  EXPECT_OK(tj_vocab_order_create_fixed(perms, perm_sizes, 2, &order));
  perm_b[0] = 7; /* copied: the handle keeps its own */
  int64_t forwards = -1, rebuilds = -1;
  EXPECT_OK(tj_vocab_order_stats(order, &forwards, NULL, &rebuilds, NULL));
  CHECK(forwards == 0 && rebuilds == 0);
  tj_vocab_order_destroy(order);
  /* Gradient buffers given to the forward: one per segment, or none. */
  static float early_w[4 * D];
  tj_tensor early = host_tensor(early_w, TJ_DTYPE_F32, 2, w_shape, NULL);
  const tj_tensor* one_early[1] = {&early};
  tj_linear_ce_outputs early_outs = {NULL, NULL, NULL, one_early, 1};
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, NULL, &early_outs, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "num_d_weight is 1");
  early_outs.d_weight = NULL;
  EXPECT_ERROR(tj_linear_ce_forward(loss, &in, NULL, NULL, &early_outs, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "outputs->d_weight is NULL");
  /* What the GPU path cannot run is refused before looking for a GPU: a teacher layout cut
     elsewhere than the student's (the CPU backend takes it). */
  tj_program* distill = NULL;
  EXPECT_OK(tj_program_from_text("loss cut {\n  segment v : [0, 8) weight W\n"
                                 "  kl alpha = 0.5 temperature = 2\n"
                                 "  teacher segment lo : [0, 4) weight T_lo\n"
                                 "  teacher segment hi : [4, 8) weight T_hi\n}\n",
                                 "cut.tj", &distill));
  tj_tensor dev_h = host_tensor(q16, TJ_DTYPE_BF16, 2, h_shape, NULL);
  dev_h.device = 0;
  tj_linear_ce_inputs dev_in = {&dev_h, &tt, NULL, 0, NULL};
  EXPECT_ERROR(tj_linear_ce_forward(distill, &dev_in, NULL, NULL, NULL, NULL, &state),
               TJ_ERR_UNSUPPORTED, "must start and end where the student's do");
  tj_program_destroy(distill);

  /* Backward errors from a good forward. */
  EXPECT_OK(tj_linear_ce_forward(loss, &in, NULL, NULL, NULL, NULL, &state));
  static float d_hidden[N * D], d_w_a[4 * D], d_w_b[4 * D], d_b_b[4];
  tj_tensor g = host_tensor(one, TJ_DTYPE_F32, 1, one_shape, NULL);
  tj_tensor tdh = host_tensor(d_hidden, TJ_DTYPE_F32, 2, h_shape, NULL);
  tj_tensor tdwa = host_tensor(d_w_a, TJ_DTYPE_F32, 2, w_shape, NULL);
  tj_tensor tdwb = host_tensor(d_w_b, TJ_DTYPE_F32, 2, w_shape, NULL);
  tj_tensor tdbb = host_tensor(d_b_b, TJ_DTYPE_F32, 1, b_shape, NULL);
  tj_segment_gradients grads[2] = {{&tdwa, NULL}, {&tdwb, &tdbb}};
  one[0] = 1;
  EXPECT_ERROR(tj_linear_ce_backward(NULL, &g, &tdh, grads, 2, NULL), TJ_ERR_INVALID_ARGUMENT,
               "loss state is NULL");
  EXPECT_ERROR(tj_linear_ce_backward(state, &g, &tdh, grads, 1, NULL), TJ_ERR_INVALID_ARGUMENT,
               "num_segments is 1");
  EXPECT_ERROR(tj_linear_ce_backward(state, &g, &tdh, NULL, 2, NULL), TJ_ERR_INVALID_ARGUMENT,
               "segment gradients are NULL");
  grads[1].d_bias = NULL;
  EXPECT_ERROR(tj_linear_ce_backward(state, &g, &tdh, grads, 2, NULL), TJ_ERR_INVALID_ARGUMENT,
               "bias 'b_b'");
  grads[1].d_bias = &tdbb;
  grads[0].d_bias = &tdbb;
  EXPECT_ERROR(tj_linear_ce_backward(state, &g, &tdh, grads, 2, NULL), TJ_ERR_INVALID_ARGUMENT,
               "segment 'a' has no bias");
  grads[0].d_bias = NULL;
  grads[0].d_weight = &tdwa;
  tj_tensor bad_dw = host_tensor(d_w_a, TJ_DTYPE_F32, 2, narrow, NULL);
  grads[1].d_weight = &bad_dw;
  EXPECT_ERROR(tj_linear_ce_backward(state, &g, &tdh, grads, 2, NULL), TJ_ERR_INVALID_ARGUMENT,
               "'d_W_b'");
  grads[1].d_weight = NULL; /* the forward was not given it */
  EXPECT_ERROR(tj_linear_ce_backward(state, &g, &tdh, grads, 2, NULL), TJ_ERR_INVALID_ARGUMENT,
               "forward was not given it");
  grads[1].d_weight = &tdwb;
  tj_tensor two = host_tensor(row, TJ_DTYPE_F32, 1, b_shape, NULL);
  EXPECT_ERROR(tj_linear_ce_backward(state, &two, &tdh, grads, 2, NULL), TJ_ERR_INVALID_ARGUMENT,
               "'grad_loss' must hold one element");
  EXPECT_ERROR(tj_linear_ce_state_rows(NULL, NULL, NULL), TJ_ERR_INVALID_ARGUMENT,
               "loss state is NULL");
  poison(d_hidden, N * D);
  EXPECT_OK(tj_linear_ce_backward(state, &g, &tdh, grads, 2, NULL));
  for (int i = 0; i < N * D; ++i) CHECK(!isnan(d_hidden[i]));
  tj_linear_ce_state_destroy(state);
  tj_linear_ce_state_destroy(NULL);
  tj_program_destroy(loss);
}

void test_errors(void) {
  fprintf(stderr, "error paths\n");
  for (size_t i = 0; i < sizeof q / sizeof q[0]; ++i) {
    q[i] = (float)rng_uniform(-1, 1);
    k[i] = (float)rng_uniform(-1, 1);
    v[i] = (float)rng_uniform(-1, 1);
    d_out[i] = (float)rng_uniform(-1, 1);
    q16[i] = f32_to_bf16(q[i]);
  }
  tj_program *causal = NULL, *doc_softcap = NULL, *loss = NULL;
  EXPECT_OK(tj_program_from_stdlib("causal", &causal));
  EXPECT_OK(tj_program_from_stdlib("doc_softcap", &doc_softcap));
  EXPECT_OK(tj_program_from_stdlib("two_segments", &loss));
  good_forward(causal);
  program_errors(causal);
  binding_errors(doc_softcap);
  tensor_errors(causal);
  block_mask_errors(causal, loss);
  loss_errors(causal);
  tj_program_destroy(causal);
  tj_program_destroy(doc_softcap);
  tj_program_destroy(loss);
}
