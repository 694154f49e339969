/* tilejit's C ABI: programs, bindings, block masks, attention and fused linear cross-entropy
 * behind opaque handles and plain structs, for C and for any FFI (ctypes, cffi, Rust, Go).
 * C99; no C++ type crosses it and no C++ exception escapes it.
 *
 * Errors. Every function that can fail returns a tj_status; TJ_OK is 0. On failure,
 * tj_last_error() gives the library's message naming the function, the program and the tensor,
 * buffer or param at fault (a parse error reads "file:line:col: ..." and shows the line). The
 * message is per thread and lives until the next tj_ call on that thread; a successful call
 * leaves it empty. Inputs are checked before any work, so a call rejected for bad input has
 * written no output; a handle out-parameter is set to NULL on any failure.
 *
 * Ownership. A handle returned through an out-parameter belongs to the caller, who frees it
 * with its tj_*_destroy function (NULL is accepted and ignored). Strings returned by queries
 * belong to the handle they came from and live as long as it. tilejit never owns tensor
 * memory: a tj_tensor is a view; its shape and strides are copied during the call, its data is
 * only referenced. Bound buffers must stay alive while the bindings (or a loss state built
 * with them) are used; a block mask is a value and keeps no reference to them.
 *
 * Threads. A handle may be used by one thread at a time; different handles may be used from
 * different threads at once. Programs and block masks are never modified after creation, so
 * several threads may read one concurrently.
 *
 * Where work runs follows the tensors: all in host memory (device = TJ_HOST) runs on the CPU
 * backend (no GPU needed; `stream` is ignored); all in device memory (device = CUDA ordinal)
 * runs the JIT-compiled GPU kernels on `stream` (a CUstream; NULL is the legacy default
 * stream) in the calling thread's current CUDA context, or the tensors' device's primary
 * context when none is current. Mixing host and device tensors in one call is an error.
 *
 * Compatibility. Before 1.0 the plain structs may gain fields at their end between versions
 * (tj_linear_ce_options and tj_linear_ce_outputs did in 0.1): build against the header of the
 * library you load, and fill option structs with their _init function. */
#ifndef TILEJIT_C_API_H
#define TILEJIT_C_API_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define TJ_API
#else
#define TJ_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors and version ------------------------------------------------------------------ */

typedef enum tj_status {
  TJ_OK = 0,
  TJ_ERR_INVALID_ARGUMENT = 1, /* a NULL or bad handle, tensor, binding, option, program kind */
  TJ_ERR_PARSE = 2,            /* program text rejected: syntax, names, types, layout */
  TJ_ERR_VALIDATION = 3,       /* a program the parser accepted but lowering rejects */
  TJ_ERR_COMPILE = 4,          /* NVRTC rejected a generated kernel (the log is in the message) */
  TJ_ERR_CUDA = 5,             /* a CUDA driver call failed */
  TJ_ERR_UNSUPPORTED = 6,      /* valid, but not supported (yet) where it would run */
  TJ_ERR_OFFLINE_MISS = 7,     /* TILEJIT_OFFLINE=1 and the kernel is not in the cache bundle */
  TJ_ERR_BUNDLE_MISMATCH = 8,  /* the cache bundle was built by another tilejit or NVRTC */
  TJ_ERR_NO_DEVICE = 9,        /* device tensors, but no usable GPU (the message says why) */
  TJ_ERR_OUT_OF_MEMORY = 10,
  TJ_ERR_INTERNAL = 11 /* a broken invariant inside tilejit: please report it */
} tj_status;

/* The calling thread's last error message ("" after a successful call). Never NULL. */
TJ_API const char* tj_last_error(void);
/* "TJ_OK", "TJ_ERR_PARSE", ...; "TJ_ERR_UNKNOWN" for a value outside the enum. */
TJ_API const char* tj_status_name(tj_status status);
/* tilejit's version, e.g. "0.1.0". */
TJ_API const char* tj_version(void);
/* 1 when a CUDA driver and at least one device are usable, else 0. */
TJ_API int tj_gpu_available(void);

/* ---- tensors ----------------------------------------------------------------------------- */

/* Element types (the values of tj_tensor.dtype). Captured buffers are i32, f32, bf16 or f16. */
typedef enum tj_dtype {
  TJ_DTYPE_F32 = 0,
  TJ_DTYPE_F16 = 1,
  TJ_DTYPE_BF16 = 2,
  TJ_DTYPE_I32 = 3,
  TJ_DTYPE_I64 = 4, /* loss targets on the CPU backend */
  TJ_DTYPE_U8 = 5,
  TJ_DTYPE_BOOL = 6 /* one byte per element */
} tj_dtype;

#define TJ_HOST (-1) /* tj_tensor.device for host memory */
#define TJ_MAX_NDIM 8

/* A strided view of memory the caller owns. strides are in elements; NULL means contiguous
 * (row-major). device: TJ_HOST, or the CUDA ordinal of the device memory. */
typedef struct tj_tensor {
  void* data;
  int32_t dtype; /* tj_dtype */
  int32_t ndim;  /* 0 .. TJ_MAX_NDIM */
  const int64_t* shape;
  const int64_t* strides;
  int32_t device;
} tj_tensor;

/* ---- programs ---------------------------------------------------------------------------- */

typedef struct tj_program tj_program;

typedef enum tj_program_kind { TJ_PROGRAM_ATTENTION = 1, TJ_PROGRAM_LOSS = 2 } tj_program_kind;

/* Parses and validates a program in the text form (.tj). `filename` (may be NULL) only labels
 * error messages. The parser checks names, types and layouts as it reads, so it reports those
 * too as TJ_ERR_PARSE, with their position; TJ_ERR_VALIDATION is a program it accepted that
 * lowering rejects. */
TJ_API tj_status tj_program_from_text(const char* text, const char* filename, tj_program** out);
/* One of the standard programs (the .tj files of examples/programs: "causal", "doc_softcap",
 * "llama3", "two_segments", ...), by name. */
TJ_API tj_status tj_program_from_stdlib(const char* name, tj_program** out);
TJ_API void tj_program_destroy(tj_program* program);

TJ_API tj_status tj_program_kind_of(const tj_program* program, tj_program_kind* kind);
TJ_API tj_status tj_program_name(const tj_program* program, const char** name);
/* The canonical text form; parsing it gives back the same program. */
TJ_API tj_status tj_program_text(const tj_program* program, const char** text);
/* 64 hex digits: the sha256 of the canonical text, the program's identity. */
TJ_API tj_status tj_program_hash(const tj_program* program, const char** hash);
/* A loss program's number of vocabulary segments (the length of its weight arrays). */
TJ_API tj_status tj_program_segment_count(const tj_program* program, int32_t* count);

/* How a loss program reduces its rows' losses into tj_linear_ce_outputs.loss, and so what its
 * backward's grad_loss is (one element for mean and sum, [N] for none). */
typedef enum tj_reduction {
  TJ_REDUCTION_NONE = 0,
  TJ_REDUCTION_SUM = 1,
  TJ_REDUCTION_MEAN = 2 /* over the rows whose target is not ignore_index */
} tj_reduction;

/* A loss program's reduction (TJ_ERR_INVALID_ARGUMENT for an attention program). */
TJ_API tj_status tj_program_reduction(const tj_program* program, tj_reduction* reduction);

/* One vocabulary segment of a loss program: its global ids [begin, end) and the names its weight
 * [end - begin, D] and bias [end - begin] are bound by. Strings belong to the program. */
typedef struct tj_segment_info {
  const char* name;
  int64_t begin, end;
  const char* weight;
  const char* bias; /* NULL when the segment has no bias */
} tj_segment_info;

/* Segment `index` (0 .. segment count - 1, in the program's order, which is the order of
 * tj_linear_ce_inputs.segments) of a loss program. */
TJ_API tj_status tj_program_segment(const tj_program* program, int32_t index,
                                    tj_segment_info* info);

/* ---- bindings ---------------------------------------------------------------------------- */

/* Values for a program's captured buffers and params (and, for a loss, its segments' weights
 * and biases), by the names the program declares. Checked against the program at each call:
 * an unbound or unknown name, a wrong dtype, rank or size is an error naming it. Setting a
 * name again replaces its value. */
typedef struct tj_bindings tj_bindings;

TJ_API tj_status tj_bindings_create(tj_bindings** out);
TJ_API void tj_bindings_destroy(tj_bindings* bindings);
TJ_API tj_status tj_bindings_set_buffer(tj_bindings* bindings, const char* name,
                                        const tj_tensor* tensor);
TJ_API tj_status tj_bindings_set_f32(tj_bindings* bindings, const char* name, float value);
TJ_API tj_status tj_bindings_set_i32(tj_bindings* bindings, const char* name, int32_t value);

/* ---- block masks ------------------------------------------------------------------------- */

/* Which (q tile, kv tile) pairs attention visits, and which of them skip the mask: built once
 * from an attention program's mask without evaluating it per element, reusable across layers
 * and calls with the same shapes and buffer values. */
typedef struct tj_block_mask tj_block_mask;

/* batch and heads: the tensors' B and Hq (the mask keeps 1 where it does not read b or h).
 * block_q, block_kv: tile sizes; 0 picks the GPU kernels' 128 x 64 (the CPU takes any). */
typedef struct tj_block_mask_shape {
  int32_t batch, heads, seq_q, seq_kv, block_q, block_kv;
} tj_block_mask_shape;

/* The mask's captured buffers come from `bindings` (NULL: none), in host memory (analysed on
 * the CPU) or device memory (analysed on the GPU, on `stream`). On the GPU the analysis runs
 * after the work queued on `stream` (the buffers' producers) and the call waits for `stream`
 * alone, never for other streams, since the mask comes back to host memory (the driver's
 * cuMemFree of the analysis's scratch may still wait for the device). The mask is a host value:
 * attention calls that use it do not wait for anything. */
TJ_API tj_status tj_block_mask_create(const tj_program* program, const tj_bindings* bindings,
                                      const tj_block_mask_shape* shape, void* stream,
                                      tj_block_mask** out);
TJ_API void tj_block_mask_destroy(tj_block_mask* mask);
/* Tiles that are full (mask skipped), partial (mask evaluated) and empty (never visited),
 * over the mask's own extents. Any pointer may be NULL. */
TJ_API tj_status tj_block_mask_counts(const tj_block_mask* mask, int64_t* full, int64_t* partial,
                                      int64_t* empty);
/* The mask's extents (batch or heads 1 where broadcast) and tile sizes. */
TJ_API tj_status tj_block_mask_get_shape(const tj_block_mask* mask, tj_block_mask_shape* shape);

/* ---- attention --------------------------------------------------------------------------- */

/* All zeros (or a NULL pointer) means the defaults. */
typedef struct tj_attention_options {
  float scale; /* multiplies <q, k> when has_scale is nonzero; default 1 / sqrt(D) */
  int32_t has_scale;
  int32_t deterministic; /* GPU backward without atomics (bit-identical dq); CPU always is */
} tj_attention_options;

/* O = softmax(mask(score_mod(scale * Q K^T))) V into `out`, and its natural-log log-sum-exp
 * into `lse` (NULL: not wanted; on the GPU the call then synchronises `stream`).
 * q, out: [B, Hq, Sq, D]; k, v: [B, Hkv, Skv, D] with Hq a multiple of Hkv; lse: [B, Hq, Sq]
 * f32 contiguous. Any strides with a contiguous last dimension (pass [B, S, H, D] memory as a
 * permuted view). Host: f32, bf16 or f16, any head dim. Device: bf16 or f16, head dim 64 or
 * 128, 16-byte aligned rows, block mask tiles 128 x 64. block_mask NULL: built for this call
 * from the program (build it once with tj_block_mask_create to reuse it). bindings NULL: the
 * program captures nothing. Outputs are written, never accumulated into. */
TJ_API tj_status tj_attention_forward(const tj_program* program, const tj_tensor* q,
                                      const tj_tensor* k, const tj_tensor* v,
                                      const tj_bindings* bindings, const tj_block_mask* block_mask,
                                      const tj_attention_options* options, const tj_tensor* out,
                                      const tj_tensor* lse, void* stream);

/* dq, dk, dv (shaped like q, k, v) from the forward's inputs, `out` and `lse` and the output
 * gradient d_out. bindings, block_mask and options must be the forward's. */
TJ_API tj_status tj_attention_backward(const tj_program* program, const tj_tensor* q,
                                       const tj_tensor* k, const tj_tensor* v, const tj_tensor* out,
                                       const tj_tensor* lse, const tj_tensor* d_out,
                                       const tj_bindings* bindings, const tj_block_mask* block_mask,
                                       const tj_attention_options* options, const tj_tensor* dq,
                                       const tj_tensor* dk, const tj_tensor* dv, void* stream);

/* ---- fused linear cross-entropy ---------------------------------------------------------- */

/* The saved state between a forward and its backward. */
typedef struct tj_linear_ce_state tj_linear_ce_state;

/* A vocabulary order kept across forwards (GPU gradient filtering): each segment's ids ordered by
 * their average logit over a forward's rows, rebuilt every `refresh_every` forwards (>= 1), so
 * that the likely ids share tiles and the backward skips the others. An order that leaves too
 * many tiles alive pauses filtering until its next rebuild. Thread-safe; a forward's state keeps
 * the order it used alive, so destroying the handle early is safe. */
typedef struct tj_vocab_order tj_vocab_order;
TJ_API tj_status tj_vocab_order_create(int32_t refresh_every, tj_vocab_order** order);
/* The caller's order, never rebuilt nor paused: rows_in_order[s] lists segment s's weight rows
 * in visiting order, a permutation of 0 .. sizes[s] - 1 (e.g. the ids by their frequency in the
 * training data: no pre-pass, ordered from the first step). Copied. TJ_ERR_INVALID_ARGUMENT,
 * naming the segment, unless each is a permutation; a forward whose program's layout it does
 * not fit fails likewise. */
TJ_API tj_status tj_vocab_order_create_fixed(const int32_t* const* rows_in_order,
                                             const int64_t* sizes, int32_t num_segments,
                                             tj_vocab_order** order);
TJ_API void tj_vocab_order_destroy(tj_vocab_order* order);
/* What the order has seen: forwards that used it, of which filtered in the order, pre-pass runs
 * (rebuilds), and the last backward's fraction of visited tiles (-1 before any). Any out-pointer
 * may be NULL. */
TJ_API tj_status tj_vocab_order_stats(const tj_vocab_order* order, int64_t* forwards,
                                      int64_t* ordered_forwards, int64_t* rebuilds,
                                      double* last_survival);

/* Where a filtering forward's vocabulary order comes from. */
typedef enum tj_vocab_ordering {
  TJ_VOCAB_NATURAL = 0,       /* ids in the layout's order */
  TJ_VOCAB_AVERAGE_LOGIT = 1, /* a pre-pass on this forward's rows (one GEMV, one more sync) */
  TJ_VOCAB_STATE = 2          /* tj_linear_ce_options.vocab_order, reused across forwards */
} tj_vocab_ordering;

typedef struct tj_linear_ce_options {
  float filter_threshold;    /* GPU gradient filtering: < 0 the dtype's default, 0 exact */
  int32_t deterministic;     /* every kernel of this path is deterministic; kept for the future */
  int64_t grad_buffer_bytes; /* GPU backward staging bound; 0 the library's (LinearCe.h) */
  int32_t vocab_ordering;    /* a tj_vocab_ordering (GPU; the CPU executor visits every id) */
  tj_vocab_order* vocab_order; /* TJ_VOCAB_STATE: the order (required then, NULL otherwise) */
} tj_linear_ce_options;

/* The defaults: filter_threshold -1, deterministic 1, grad_buffer_bytes 0, natural order.
 * A NULL options pointer means the same. */
TJ_API void tj_linear_ce_options_init(tj_linear_ce_options* options);

/* A segment's weight [V_s, D] and bias [V_s] (NULL when the segment has none). */
typedef struct tj_segment_tensors {
  const tj_tensor* weight;
  const tj_tensor* bias;
} tj_segment_tensors;

/* hidden [N, D]; targets [N] global ids (or the program's ignore_index), i32 (host: or i64).
 * The segments' tensors come either from `segments` (num_segments entries, in the program's
 * order) or, when segments is NULL and num_segments 0, from the bindings under the names the
 * program gives them. Host: f32, bf16 or f16. Device: bf16 or f16, D a multiple of 8, rows
 * 16-byte aligned. A program with a KL term (CPU backend) also takes teacher_hidden [N, D_t],
 * and its teacher layout's weights and biases from the bindings by name; NULL otherwise. */
typedef struct tj_linear_ce_inputs {
  const tj_tensor* hidden;
  const tj_tensor* targets;
  const tj_segment_tensors* segments;
  int32_t num_segments;
  const tj_tensor* teacher_hidden;
} tj_linear_ce_inputs;

/* f32 outputs, each optional (NULL): loss (one element: the mean or sum over kept rows as the
 * program says; reduction none gives the sum), row_loss [N] and lse [N] (0 on ignored rows).
 * d_weight (NULL, or num_d_weight = the program's segment count entries, each may be NULL): the
 * buffers the backward will write the weights' gradients into, given to the forward already (the
 * backward's rules for them). On the GPU the forward builds an ordered segment's position-order
 * weight copy in its buffer (contiguous rows) rather than in library scratch, so a step needs
 * V_s x D fewer elements; the contents are undefined until the backward, which writes the
 * gradients there when its own segments[i].d_weight is NULL. They must stay alive until then. */
typedef struct tj_linear_ce_outputs {
  const tj_tensor* loss;
  const tj_tensor* row_loss;
  const tj_tensor* lse;
  const tj_tensor* const* d_weight;
  int32_t num_d_weight;
} tj_linear_ce_outputs;

/* The forward of a loss program. The state keeps what the backward needs and views of the
 * inputs: hidden, targets, the weights, biases and bound buffers must stay alive and unchanged
 * until the backward. On the GPU the forward synchronises `stream` once (the kept-row count
 * sizes the later grids). */
TJ_API tj_status tj_linear_ce_forward(const tj_program* program, const tj_linear_ce_inputs* inputs,
                                      const tj_bindings* bindings,
                                      const tj_linear_ce_options* options,
                                      const tj_linear_ce_outputs* outputs, void* stream,
                                      tj_linear_ce_state** state);

/* A segment's weight gradient [V_s, D] (NULL when the forward was given it in
 * tj_linear_ce_outputs.d_weight) and bias gradient [V_s] (NULL exactly when the segment has no
 * bias). */
typedef struct tj_segment_gradients {
  const tj_tensor* d_weight;
  const tj_tensor* d_bias;
} tj_segment_gradients;

/* Gradients into caller-allocated tensors, placed like the forward's: d_hidden like hidden
 * (host: f32, bf16 or f16; device: f32), one tj_segment_gradients per segment. grad_loss is
 * f32: one element (dL/dloss) for reductions mean and sum, [N] for none. On the GPU the state's
 * workspace is freed in stream order after the forward's and the backwards' work, so the state
 * may be destroyed while that work runs; the forward's stream must outlive the state. */
TJ_API tj_status tj_linear_ce_backward(tj_linear_ce_state* state, const tj_tensor* grad_loss,
                                       const tj_tensor* d_hidden,
                                       const tj_segment_gradients* segments, int32_t num_segments,
                                       void* stream);

/* Rows in the forward, and rows that were not ignore_index. Either pointer may be NULL. */
TJ_API tj_status tj_linear_ce_state_rows(const tj_linear_ce_state* state, int64_t* rows,
                                         int64_t* kept_rows);
TJ_API void tj_linear_ce_state_destroy(tj_linear_ce_state* state);

/* The fused loss's GPU scratch comes from a memory pool per device, in stream order, which keeps
 * what a call used for the next call (at most TILEJIT_WORKSPACE_KEEP_MB MiB when that variable is
 * set; all of it otherwise). tj_workspace_pool_held: the bytes the pool of the device this
 * thread's calls use holds from it (0 without a GPU). tj_workspace_pool_trim: hands back what no
 * call in flight uses. */
TJ_API tj_status tj_workspace_pool_held(uint64_t* bytes);
TJ_API tj_status tj_workspace_pool_trim(void);

#ifdef __cplusplus
}
#endif

#endif /* TILEJIT_C_API_H */
