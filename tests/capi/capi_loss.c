/* The fused linear cross-entropy through the C ABI on host memory: a two-segment layout with
 * dead ids between the segments, a bias, soft-capping through a param, label smoothing, z-loss
 * and ignored rows; forward and backward against the fp64 reference (capi_reference.c), the
 * segments' tensors given through the bindings and as an explicit array (same results). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi_check.h"
#include "capi_reference.h"
#include "tilejit.h"

static const char* kLossText =
    "# Two segments, 7 dead ids between them\n"
    "loss capi_two_segments {\n"
    "  param cap : f32\n"
    "  segment base : [0, 40) weight W_base\n"
    "  segment extra : [47, 60) weight W_extra bias b_extra\n"
    "  logit = cap * tanh(logit / cap)\n"
    "  label_smoothing = 0.1\n"
    "  z_loss = 0.001\n"
    "  ignore_index = -100\n"
    "  reduction = mean\n"
    "}\n";

/* The same head distilled from a teacher with its own hidden size and its own layout of the
 * same live ids (three segments, one with a bias). */
static const char* kDistillText =
    "loss capi_distill {\n"
    "  param cap : f32\n"
    "  segment base : [0, 40) weight W_base\n"
    "  segment extra : [47, 60) weight W_extra bias b_extra\n"
    "  logit = cap * tanh(logit / cap)\n"
    "  label_smoothing = 0.1\n"
    "  z_loss = 0.001\n"
    "  kl alpha = 0.3 temperature = 2\n"
    "  teacher segment t0 : [0, 25) weight T_a\n"
    "  teacher segment t1 : [25, 40) weight T_b bias tb_b\n"
    "  teacher segment t2 : [47, 60) weight T_c\n"
    "}\n";

enum { kRows = 23, kDim = 12, kBase = 40, kExtra = 13, kExtraBegin = 47 };
enum { kTeacherDim = 10, kTeacherA = 25, kTeacherB = 15 };

typedef struct loss_data {
  float hidden[kRows * kDim], w_base[kBase * kDim], w_extra[kExtra * kDim], b_extra[kExtra];
  int32_t targets[kRows];
  double hidden64[kRows * kDim], w_base64[kBase * kDim], w_extra64[kExtra * kDim],
      b_extra64[kExtra];
  int64_t targets64[kRows];
} loss_data;

typedef struct teacher_data {
  float hidden[kRows * kTeacherDim], t_a[kTeacherA * kTeacherDim], t_b[kTeacherB * kTeacherDim],
      tb_b[kTeacherB], t_c[kExtra * kTeacherDim];
  double hidden64[kRows * kTeacherDim], t_a64[kTeacherA * kTeacherDim],
      t_b64[kTeacherB * kTeacherDim], tb_b64[kTeacherB], t_c64[kExtra * kTeacherDim];
} teacher_data;

typedef struct loss_results {
  float loss, row_loss[kRows], lse[kRows];
  float d_hidden[kRows * kDim], d_w_base[kBase * kDim], d_w_extra[kExtra * kDim], d_b_extra[kExtra];
} loss_results;

static void fill(float* f, double* d, int n, double scale) {
  for (int i = 0; i < n; ++i) d[i] = f[i] = (float)rng_uniform(-scale, scale);
}

static void make_data(loss_data* x) {
  fill(x->hidden, x->hidden64, kRows * kDim, 1.0);
  fill(x->w_base, x->w_base64, kBase * kDim, 0.5);
  fill(x->w_extra, x->w_extra64, kExtra * kDim, 0.5);
  fill(x->b_extra, x->b_extra64, kExtra, 0.5);
  for (int r = 0; r < kRows; ++r) {
    int64_t t = rng_below(kBase + kExtra);
    if (t >= kBase) t += kExtraBegin - kBase;  /* into the second segment */
    if (rng_below(4) == 0 || r == 0) t = -100; /* ignored rows, at least one */
    x->targets[r] = (int32_t)t;
    x->targets64[r] = t;
  }
}

static void make_teacher(teacher_data* t) {
  fill(t->hidden, t->hidden64, kRows * kTeacherDim, 1.0);
  fill(t->t_a, t->t_a64, kTeacherA * kTeacherDim, 0.8);
  fill(t->t_b, t->t_b64, kTeacherB * kTeacherDim, 0.8);
  fill(t->tb_b, t->tb_b64, kTeacherB, 0.5);
  fill(t->t_c, t->t_c64, kExtra * kTeacherDim, 0.8);
}

static const int64_t kHiddenShape[2] = {kRows, kDim}, kRowsShape[1] = {kRows}, kOneShape[1] = {1},
                     kBaseShape[2] = {kBase, kDim}, kExtraShape[2] = {kExtra, kDim},
                     kBiasShape[1] = {kExtra};

/* The teacher's tensors: its hidden states as an input, its weights bound by name. */
static void bind_teacher(tj_bindings* bind, teacher_data* t, tj_tensor* hidden) {
  static const int64_t hidden_shape[2] = {kRows, kTeacherDim},
                       a_shape[2] = {kTeacherA, kTeacherDim}, b_shape[2] = {kTeacherB, kTeacherDim},
                       bias_shape[1] = {kTeacherB}, c_shape[2] = {kExtra, kTeacherDim};
  *hidden = host_tensor(t->hidden, TJ_DTYPE_F32, 2, hidden_shape, NULL);
  tj_tensor a = host_tensor(t->t_a, TJ_DTYPE_F32, 2, a_shape, NULL);
  tj_tensor b = host_tensor(t->t_b, TJ_DTYPE_F32, 2, b_shape, NULL);
  tj_tensor bias = host_tensor(t->tb_b, TJ_DTYPE_F32, 1, bias_shape, NULL);
  tj_tensor c = host_tensor(t->t_c, TJ_DTYPE_F32, 2, c_shape, NULL);
  EXPECT_OK(tj_bindings_set_buffer(bind, "T_a", &a));
  EXPECT_OK(tj_bindings_set_buffer(bind, "T_b", &b));
  EXPECT_OK(tj_bindings_set_buffer(bind, "tb_b", &bias));
  EXPECT_OK(tj_bindings_set_buffer(bind, "T_c", &c));
}

/* How run_loss calls the library beyond its defaults. */
enum { kGradsAtForward = 1, kVocabOrder = 2 };

/* Forward and backward; segments from the bindings, or as an explicit array; i32 or i64
 * targets; with a teacher for a program with a KL term; `flags`: the weights' gradient buffers
 * given to the forward (and NULL in the backward), a vocabulary order object (the CPU executor
 * visits every id: the same results). */
static void run_loss(const tj_program* prog, loss_data* x, teacher_data* teacher,
                     int explicit_segments, int i64_targets, int flags, loss_results* res) {
  tj_bindings* bind = NULL;
  EXPECT_OK(tj_bindings_create(&bind));
  EXPECT_OK(tj_bindings_set_f32(bind, "cap", 3.0f));
  tj_tensor teacher_hidden;
  tj_tensor hidden = host_tensor(x->hidden, TJ_DTYPE_F32, 2, kHiddenShape, NULL);
  tj_tensor targets = i64_targets ? host_tensor(x->targets64, TJ_DTYPE_I64, 1, kRowsShape, NULL)
                                  : host_tensor(x->targets, TJ_DTYPE_I32, 1, kRowsShape, NULL);
  tj_tensor w_base = host_tensor(x->w_base, TJ_DTYPE_F32, 2, kBaseShape, NULL);
  tj_tensor w_extra = host_tensor(x->w_extra, TJ_DTYPE_F32, 2, kExtraShape, NULL);
  tj_tensor b_extra = host_tensor(x->b_extra, TJ_DTYPE_F32, 1, kBiasShape, NULL);
  tj_segment_tensors segments[2] = {{&w_base, NULL}, {&w_extra, &b_extra}};
  tj_linear_ce_inputs in = {&hidden, &targets, NULL, 0, NULL};
  if (teacher) {
    bind_teacher(bind, teacher, &teacher_hidden);
    in.teacher_hidden = &teacher_hidden;
  }
  if (explicit_segments) {
    in.segments = segments;
    in.num_segments = 2;
  } else {
    EXPECT_OK(tj_bindings_set_buffer(bind, "W_base", &w_base));
    EXPECT_OK(tj_bindings_set_buffer(bind, "W_extra", &w_extra));
    EXPECT_OK(tj_bindings_set_buffer(bind, "b_extra", &b_extra));
  }
  tj_tensor loss = host_tensor(&res->loss, TJ_DTYPE_F32, 1, kOneShape, NULL);
  tj_tensor row_loss = host_tensor(res->row_loss, TJ_DTYPE_F32, 1, kRowsShape, NULL);
  tj_tensor lse = host_tensor(res->lse, TJ_DTYPE_F32, 1, kRowsShape, NULL);
  tj_tensor d_w_base = host_tensor(res->d_w_base, TJ_DTYPE_F32, 2, kBaseShape, NULL);
  tj_tensor d_w_extra = host_tensor(res->d_w_extra, TJ_DTYPE_F32, 2, kExtraShape, NULL);
  const tj_tensor* early[2] = {&d_w_base, &d_w_extra};
  tj_linear_ce_outputs out = {&loss, &row_loss, &lse, NULL, 0};
  if (flags & kGradsAtForward) {
    out.d_weight = early;
    out.num_d_weight = 2;
  }
  tj_linear_ce_options options;
  tj_linear_ce_options_init(&options);
  options.filter_threshold = 0; /* exact */
  tj_vocab_order* order = NULL;
  if (flags & kVocabOrder) {
    EXPECT_OK(tj_vocab_order_create(4, &order));
    options.vocab_ordering = TJ_VOCAB_STATE;
    options.vocab_order = order;
  }

  poison((float*)res, sizeof *res / sizeof(float));
  tj_linear_ce_state* state = NULL;
  EXPECT_OK(tj_linear_ce_forward(prog, &in, bind, &options, &out, NULL, &state));
  int64_t rows = -1, kept = -1, want_kept = 0;
  for (int r = 0; r < kRows; ++r) want_kept += x->targets[r] != -100;
  EXPECT_OK(tj_linear_ce_state_rows(state, &rows, &kept));
  CHECK(rows == kRows && kept == want_kept);

  float grad_loss = 0.75f;
  tj_tensor g = host_tensor(&grad_loss, TJ_DTYPE_F32, 1, kOneShape, NULL);
  tj_tensor d_hidden = host_tensor(res->d_hidden, TJ_DTYPE_F32, 2, kHiddenShape, NULL);
  tj_tensor d_b_extra = host_tensor(res->d_b_extra, TJ_DTYPE_F32, 1, kBiasShape, NULL);
  tj_segment_gradients grads[2] = {{&d_w_base, NULL}, {&d_w_extra, &d_b_extra}};
  if (flags & kGradsAtForward) grads[0].d_weight = grads[1].d_weight = NULL;
  EXPECT_OK(tj_linear_ce_backward(state, &g, &d_hidden, grads, 2, NULL));
  tj_linear_ce_state_destroy(state);
  if (order) {
    int64_t forwards = -1, rebuilds = -1;
    double survival = 0;
    EXPECT_OK(tj_vocab_order_stats(order, &forwards, NULL, &rebuilds, &survival));
    CHECK(forwards == 0 && rebuilds == 0 && survival == -1); /* the CPU executor never asks it */
    tj_vocab_order_destroy(order);
  }
  tj_bindings_destroy(bind);
}

static void check_against_reference(const loss_data* x, const teacher_data* t,
                                    const loss_results* res) {
  ref_segment segments[2] = {{0, kBase, x->w_base64, NULL},
                             {kExtraBegin, kExtra, x->w_extra64, x->b_extra64}};
  ref_loss ref = {kRows, kDim, 2, segments, 3.0, 0.1, 0.001, -100, 0, 1, NULL, 0, 0, NULL};
  ref_segment teacher_segments[3] = {{0, kTeacherA, NULL, NULL},
                                     {kTeacherA, kTeacherB, NULL, NULL},
                                     {kExtraBegin, kExtra, NULL, NULL}};
  if (t) {
    teacher_segments[0].weight = t->t_a64;
    teacher_segments[1].weight = t->t_b64;
    teacher_segments[1].bias = t->tb_b64;
    teacher_segments[2].weight = t->t_c64;
    ref.kl_alpha = 0.3;
    ref.kl_temperature = 2;
    ref.teacher_hidden = t->hidden64;
    ref.teacher_dim = kTeacherDim;
    ref.num_teacher_segments = 3;
    ref.teacher_segments = teacher_segments;
  }
  double row_loss[kRows], lse[kRows], d_hidden[kRows * kDim], d_w_base[kBase * kDim],
      d_w_extra[kExtra * kDim], d_b_extra[kExtra];
  double loss = ref_loss_forward(&ref, x->hidden64, x->targets64, row_loss, lse);
  double* d_weight[2] = {d_w_base, d_w_extra};
  double* d_bias[2] = {NULL, d_b_extra};
  ref_loss_backward(&ref, x->hidden64, x->targets64, 0.75, d_hidden, d_weight, d_bias);
  const double tol = 1e-4;
  EXPECT_CLOSE("loss", &res->loss, &loss, 1, tol);
  EXPECT_CLOSE("row_loss", res->row_loss, row_loss, kRows, tol);
  EXPECT_CLOSE("lse", res->lse, lse, kRows, tol);
  EXPECT_CLOSE("d_hidden", res->d_hidden, d_hidden, kRows * kDim, tol);
  EXPECT_CLOSE("d_W_base", res->d_w_base, d_w_base, kBase * kDim, tol);
  EXPECT_CLOSE("d_W_extra", res->d_w_extra, d_w_extra, kExtra * kDim, tol);
  EXPECT_CLOSE("d_b_extra", res->d_b_extra, d_b_extra, kExtra, tol);
}

void test_linear_ce(void) {
  fprintf(stderr, "linear cross-entropy: N %d D %d, segments [0, %d) and [%d, %d)\n", kRows, kDim,
          kBase, kExtraBegin, kExtraBegin + kExtra);
  tj_program* prog = NULL;
  EXPECT_OK(tj_program_from_text(kLossText, "capi_two_segments.tj", &prog));
  loss_data* x = malloc(sizeof *x);
  loss_results* by_name = malloc(sizeof *by_name);
  loss_results* by_array = malloc(sizeof *by_array);
  make_data(x);
  run_loss(prog, x, NULL, 0, 0, 0, by_name);
  check_against_reference(x, NULL, by_name);
  /* The CPU executor is deterministic: the same inputs give the same bits either way. */
  run_loss(prog, x, NULL, 1, 0, 0, by_array);
  CHECK(memcmp(by_name, by_array, sizeof *by_name) == 0);
  run_loss(prog, x, NULL, 1, 1, 0, by_array);
  CHECK(memcmp(by_name, by_array, sizeof *by_name) == 0);
  /* The weights' gradient buffers given to the forward, and a vocabulary order object. */
  run_loss(prog, x, NULL, 1, 0, kGradsAtForward | kVocabOrder, by_array);
  CHECK(memcmp(by_name, by_array, sizeof *by_name) == 0);

  /* Distillation: the teacher's hidden states and layout. */
  fprintf(stderr, "linear cross-entropy with KL: teacher D %d, 3 teacher segments\n", kTeacherDim);
  tj_program* distill = NULL;
  EXPECT_OK(tj_program_from_text(kDistillText, "capi_distill.tj", &distill));
  teacher_data* teacher = malloc(sizeof *teacher);
  make_teacher(teacher);
  loss_results* distilled = malloc(sizeof *distilled);
  run_loss(distill, x, teacher, 1, 0, 0, distilled);
  check_against_reference(x, teacher, distilled);
  CHECK(fabsf(distilled->loss - by_name->loss) > 1e-3f); /* the KL term is there */

  /* Outputs are optional: a forward without any still feeds its backward. */
  tj_bindings* bind = NULL;
  EXPECT_OK(tj_bindings_create(&bind));
  EXPECT_OK(tj_bindings_set_f32(bind, "cap", 3.0f));
  tj_tensor hidden = host_tensor(x->hidden, TJ_DTYPE_F32, 2, kHiddenShape, NULL);
  tj_tensor targets = host_tensor(x->targets, TJ_DTYPE_I32, 1, kRowsShape, NULL);
  tj_tensor w_base = host_tensor(x->w_base, TJ_DTYPE_F32, 2, kBaseShape, NULL);
  tj_tensor w_extra = host_tensor(x->w_extra, TJ_DTYPE_F32, 2, kExtraShape, NULL);
  tj_tensor b_extra = host_tensor(x->b_extra, TJ_DTYPE_F32, 1, kBiasShape, NULL);
  tj_segment_tensors segments[2] = {{&w_base, NULL}, {&w_extra, &b_extra}};
  tj_linear_ce_inputs in = {&hidden, &targets, segments, 2, NULL};
  tj_linear_ce_state* state = NULL;
  EXPECT_OK(tj_linear_ce_forward(prog, &in, bind, NULL, NULL, NULL, &state));
  float grad_loss = 0.75f;
  tj_tensor g = host_tensor(&grad_loss, TJ_DTYPE_F32, 1, kOneShape, NULL);
  poison(by_array->d_hidden, kRows * kDim);
  tj_tensor d_hidden = host_tensor(by_array->d_hidden, TJ_DTYPE_F32, 2, kHiddenShape, NULL);
  tj_tensor d_w_base = host_tensor(by_array->d_w_base, TJ_DTYPE_F32, 2, kBaseShape, NULL);
  tj_tensor d_w_extra = host_tensor(by_array->d_w_extra, TJ_DTYPE_F32, 2, kExtraShape, NULL);
  tj_tensor d_b_extra = host_tensor(by_array->d_b_extra, TJ_DTYPE_F32, 1, kBiasShape, NULL);
  tj_segment_gradients grads[2] = {{&d_w_base, NULL}, {&d_w_extra, &d_b_extra}};
  EXPECT_OK(tj_linear_ce_backward(state, &g, &d_hidden, grads, 2, NULL));
  CHECK(memcmp(by_name->d_hidden, by_array->d_hidden, sizeof by_name->d_hidden) == 0);
  tj_linear_ce_state_destroy(state);

  /* A KL term without the teacher's hidden states. */
  tj_tensor unused;
  bind_teacher(bind, teacher, &unused);
  EXPECT_ERROR(tj_linear_ce_forward(distill, &in, bind, NULL, NULL, NULL, &state),
               TJ_ERR_INVALID_ARGUMENT, "teacher's hidden states");
  tj_bindings_destroy(bind);

  free(x);
  free(by_name);
  free(by_array);
  free(teacher);
  free(distilled);
  tj_program_destroy(prog);
  tj_program_destroy(distill);
}
