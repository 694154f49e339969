// Fused linear cross-entropy on the GPU: a loss program (compiler/Program.h) evaluated on hidden
// states E and the segments' weights without materializing the [N, V] logits
// (kernels_templates/linear_ce_*.cuh, generated glue from compiler/codegen/LossKernels.h).
//
//   Bindings bind{{"W_base", w_base}, {"W_extra", w_extra}, {"cap", 30.0f}};
//   LinearCeForward fwd = linear_cross_entropy_forward(prog, E, bind, targets, {}, stream);
//   // fwd.loss: device f32 scalar; fwd.row_loss, fwd.lse: device f32 [N]
//   LinearCeGradients g = linear_cross_entropy_backward(fwd, grad_loss, stream);
//   // g.d_hidden [N, D], g.d_weight[s] [V_s, D], g.d_bias[s] [V_s]: device f32
//
// Binding. One Bindings holds the segments' weights and biases under the names the program gives
// them (`segment base : [0, 151936) weight W_base bias b_base`) and the program's captured
// buffers and params. A name the program does not use is an error.
//
// Tensors (device memory; every mismatch is a UserError naming the tensor, raised before any
// launch):
//   E        [N, D] bf16 or f16, D a multiple of 8, last dim contiguous, rows 16-byte aligned;
//            at most 8,388,480 rows that are not ignore_index in a call (the backward's grid:
//            65,535 tiles of 128; more is a UserError once the forward has counted them)
//   weight   [V_s, D], E's dtype, same layout rules;   bias [V_s], E's dtype, contiguous
//   targets  [N] i32 or i64 global ids, any stride. ignore_index rows contribute nothing. A
//            target that is neither ignore_index nor a live id (a dead id between segments, a
//            negative id, one past the layout) is an error: the forward checks them on the
//            device and reads the verdict back with the kept-row count (the forward synchronizes
//            `stream` once, because the kept-row count sizes every later grid).
//
// Outputs. Results are fp32 device tensors. A caller may pass its own (LinearCeOutputs,
// LinearCeGradOutputs: a framework's allocator, no allocation per step); any it leaves out is
// allocated by the library and owned by the returned object. Workspaces come from the workspace
// pool (runtime/WorkspacePool.h) in the call's stream order; the pool keeps them for the next call.
//
// Saved state. The forward result keeps what backward needs (lse, target logits, the kept rows of
// E and, with filtering, which (128 rows x 128 ids) tiles the backward visits, one byte each,
// derived at the forward's end from per-tile max logits that are then freed) and *views* of the
// weights and captured buffers: those must stay alive and unchanged until the backward call. E
// itself is not needed by backward.
//
// Gradient filtering and the vocabulary order. Backward visits only the (128 rows x 128 ids)
// tiles holding a probability at or above LinearCeOptions::filter_threshold, which it knows from
// the per-tile max logits the forward records (skipped tiles are never recomputed). A target
// never keeps a tile alive: where a row's target lies in a skipped tile, its gradient entry t_r
// is applied as a sparse fp32 correction (dE_r += t_r C[target], dC[target] += t_r E_r, dbias
// likewise), and label smoothing's uniform term is analytic (identity logit_mod). In natural id
// order a trained head's likely ids are scattered, so nearly every tile holds one (zipf data,
// Gemma-2 head: 97% of 128 x 256 tiles survive); ordered by average logit they cluster (25%).
//   The order is one permutation per segment, not one global order over live ids: a tile then
// still lies in one segment (one weight pointer, stride and bias), dead ids between segments
// never enter a tile, and per-segment weights and biases need no remapping. It exists only
// inside the kernels: they tile positions, gather weight rows and bias entries through the
// permutation (rows stay 16-byte aligned) and write dC / dbias rows back to the weights' own
// rows. Ids, targets, logit_mod's `id`, per-row results and every tensor the caller sees are
// unchanged. An order changes which ids share a tile, never a value: visiting every tile, results
// equal the natural order's up to fp32 summation order; filtering then skips other tiles, each
// entry it drops still below the threshold. Deterministic for a given order.
//   Gathered rows cost the Hopper kernels more than contiguous ones (the forward ran 30% longer
// on a Gemma-2 head), so there the forward first copies each ordered segment's weight rows into
// position order (V_s x D elements of E's dtype, one pass over the weights) and its tiles come by
// TMA from the copy, which it allocates and frees in `stream`'s order from the workspace pool
// (runtime/WorkspacePool.h: the host waits for nothing, and the next step reuses the memory). The
// pool keeps the copy's memory reserved through the backward, which reuses part of it, and
// between steps (unless TILEJIT_WORKSPACE_KEEP_MB says otherwise), unless the caller gives the
// forward the weights' gradient buffers to build it in (LinearCeOutputs::d_weight). With a KL
// term the teacher's weight rows are copied too (V_s x D_t elements, from the pool), unless the
// teacher shares the student's weights.
// LinearCeOptions::copy_ordered_weights = false gathers instead. The backward stages each
// vocabulary chunk's visited tiles' rows the same way, beside G's blocks, within
// grad_buffer_bytes (a tile that alone needs more gets a chunk of its own), unless the forward
// built the copy in the 16-bit gradient buffer that dC goes to: then the backward reads the
// tiles there, writes each chunk's dC rows over that chunk's rows of the copy, by position, and
// finally moves every row to its weight's row in place, along the order's cycles (O(V D) bytes
// read and written once, as the staging did; grad_buffer_bytes holds G's blocks alone).
//   Where it comes from (LinearCeOptions::vocab_ordering): Natural (the default); AverageLogit, a
// pre-pass on this call's kept rows computing mean_r(E_r) . C_v + b_v for every id (one GEMV,
// O(V D); the raw logit, before logit_mod), then a stable radix sort per segment on the device,
// highest first (ties by ascending id); State, a runtime/VocabOrder.h object the caller reuses
// across steps, rebuilt from that pre-pass every k forwards or fixed by the caller. An order
// serves filtering only: with filtering off the natural order is used. The pre-pass and its sort
// run on `stream` with nothing waited for on the host.
//   Never slower than no filtering. A filtering backward reads the surviving fraction back after
// classifying the tiles (one synchronization) and, when too many tiles survive for skipping to
// pay (runtime/VocabOrderPlan.h: 95% in natural order, 65% in an order, whose gathered loads
// cost more per tile), visits every tile in natural order instead: exactly the
// unfiltered backward (no gathered loads, no sparse target corrections). The forward's share
// (tile maxima, pre-pass) can only be avoided by knowing beforehand: a State whose order left
// too many tiles alive pauses filtering until its next rebuild, so those forwards and
// backwards are exactly the unfiltered ones (LinearCeForward::filter_threshold 0) and only the
// rebuild steps look again. In natural order the forward's tile maxima remain (about 1% measured
// on data where every tile survives).
//
// Distillation. A program with a `kl` term also takes the teacher's hidden states, [N, D_t] in
// E's dtype, as LinearCeTeacher::hidden (the last argument of the forward); the teacher layout's
// weights and biases are bound by name in the same Bindings as the student's. Without a teacher
// layout the teacher uses the student's weights (D_t = D). The teacher is frozen: it gets no
// gradients. The kernels compute the teacher's logit tiles in the same sweep as the student's
// (kernels_templates/linear_ce_kl.cuh: two GEMMs per tile through one pipeline, three online
// softmax statistics per row), so nothing [N, V] exists for either; the backward recomputes both
// tiles and filters a tile only when p, q = softmax(z / T) and the teacher's pt are all below the
// threshold there (the forward records both tiles' max logits). The teacher's segments must start
// and end where the student's do (UserError otherwise; the CPU executor takes any teacher layout
// over the same ids). The forward keeps the teacher's kept rows for the backward. A teacher given
// to a program without a `kl` term is a UserError, and so is a `kl` program without one.
//
// Tile loop. The inner GEMM loop of the forward, of the backward's gradient tiles and of its dE /
// dC products is the Hopper one (wgmma, operands by TMA from a warpgroup that only loads; the
// gradient tiles a persistent CTA whose two computing warpgroups take turns, so one's epilogue
// runs under the other's products; kernels_templates/ce_wgmma.cuh) in modules compiled for
// sm_90a, the portable one (mma.sync, cp.async) for every other target: the same module source
// selects it at compile time. TILEJIT_CE_LOOP=portable
// forces the portable loop on sm_90a too (for comparison; =sm90 is the default). Read once per
// process; any other value is a UserError. The choice is part of those modules' source, so cached
// modules of either loop coexist. A KL program's forward and gradient-tile kernels run the
// portable loop (its products are every program's).
//
// Not supported on this path (UserError): more than 4 segments, a teacher layout cut elsewhere
// than the student's.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/Program.h"
#include "compiler/codegen/LossKernels.h"
#include "runtime/Bindings.h"
#include "runtime/KernelCache.h"
#include "runtime/TensorView.h"
#include "runtime/VocabOrder.h"

namespace tilejit {

// Where the vocabulary order comes from (see "Gradient filtering and the vocabulary order").
enum class VocabOrdering : uint8_t {
  Natural,       // ids in the layout's order
  AverageLogit,  // a pre-pass on this call's rows orders each segment by average logit
  State,         // LinearCeOptions::vocab_order: kept across calls, rebuilt every k or fixed
};

struct LinearCeOptions {
  // Gradient filtering: backward skips every (128 rows x 128 ids) tile whose probabilities are
  // all below the threshold. < 0: the default for E's dtype (2^-12 for bf16, 2^-15 for f16,
  // well below what the 16-bit gradient staging resolves); 0: exact (no filtering). Label
  // smoothing with a non-identity logit_mod turns filtering off: the uniform smoothing term is
  // then part of every entry, so no tile is negligible.
  float filter_threshold = -1;
  // Every kernel on this path is deterministic (fixed summation orders, no atomics): results are
  // bit-identical run to run. false is accepted and currently selects the same kernels.
  bool deterministic = true;
  // Bound on the backward's bf16/f16 buffer: the gradient tiles of the visited (row tile,
  // vocabulary tile) pairs and, with a vocabulary order on the Hopper path, the visited tiles'
  // weight rows unless it reads them in position order (it works through the vocabulary in
  // chunks that fit; a single tile that does not fit gets a chunk of its own). The buffer is the
  // largest chunk's size. 0: the library's, kDefaultGradBufferBytes, or
  // kPositionOrderGradBufferBytes where the backward stages no weights and reads some in
  // position order (fewer pairs per step: the same time with less memory, bench/NOTES.md).
  static constexpr int64_t kDefaultGradBufferBytes = int64_t{512} << 20;
  static constexpr int64_t kPositionOrderGradBufferBytes = int64_t{128} << 20;
  int64_t grad_buffer_bytes = 0;
  // The order the kernels visit each segment's ids in, when filtering is on.
  VocabOrdering vocab_ordering = VocabOrdering::Natural;
  // With an order on the Hopper path: copy an ordered segment's weights into position order for
  // the forward (transient, V_s x D elements; with a KL term the teacher's too) rather than
  // gather its rows (see above).
  bool copy_ordered_weights = true;
  // A KL term's forward on the Hopper path runs in thread block clusters of this many CTAs (1, 2
  // or 4; 0: the default, 1) along the vocabulary splits: the CTAs of a cluster take the same
  // 128 kept rows and each reads a slice of every K step's rows for all (TMA multicast), so the
  // rows, which every vocabulary tile reads again, cross from memory once per cluster. Other
  // paths ignore it (any other value is an error on every path). Measured on an H100 (N 24,576,
  // D 5120, V 248k): in the grid's row-tile order clusters of 2 took the forward from 327 to 264
  // ms, but the grouped order the forward now takes its tiles in does more alone (220 ms), and
  // clusters of 2 or 4 on top of it are slower (243-262 ms): a stage is refilled only once
  // every CTA of the cluster is done with it.
  int kl_forward_cluster = 0;
  std::shared_ptr<VocabOrder> vocab_order;  // VocabOrdering::State: the order to use
};

// A segment's bound tensors, in the program's segment order.
struct SegmentBinding {
  TensorView weight;
  std::optional<TensorView> bias;
};

// Caller-provided forward outputs (each optional).
struct LinearCeOutputs {
  std::optional<TensorView> loss;      // f32, one element: the reduced loss (none: the sum)
  std::optional<TensorView> row_loss;  // f32 [N] contiguous, 0 on ignored rows
  std::optional<TensorView> lse;       // f32 [N] contiguous, 0 on ignored rows
  // The weights' gradient buffers, per segment (each optional; LinearCeGradOutputs::d_weight's
  // rules), given to the forward already, as an autograd function that allocates its gradients
  // with its forward would. The forward then builds an ordered segment's position-order weight
  // copy ("Gradient filtering and the vocabulary order") inside that segment's buffer when the
  // buffer's rows are contiguous (row stride D, 16-byte aligned), instead of taking V_s x D from
  // the workspace pool: a state step's peak is then the outputs and the backward's scratch. Their
  // contents are undefined until the backward writes the gradients there, which it does unless
  // it is given other buffers. They must stay alive, and unwritten, until the backward (which may
  // read the copy there).
  std::vector<std::optional<TensorView>> d_weight;
};

// The teacher of a `kl` term (see "Distillation" above).
struct LinearCeTeacher {
  std::optional<TensorView> hidden;  // [N, D_t]
};

struct LinearCeState;  // saved for backward (LinearCeState.h)

struct LinearCeForward {
  TensorView loss;      // f32 [1]: mean / sum over kept rows as the program says
  TensorView row_loss;  // f32 [N]
  TensorView lse;       // f32 [N]: log-sum-exp of the modified logits over live ids
  int64_t n_rows = 0, n_kept = 0;
  float filter_threshold = 0;  // the one backward uses (0: exact)
  bool vocab_ordered = false;  // the tiles followed a vocabulary order
  // What the forward keeps (rows, statistics, kept rows, tile classes): from the workspace pool
  // (its partials and tile maxima too, freed when it returns), freed when the last reference
  // goes, on this forward's stream (which must outlive it) after the work any backward enqueued
  // on its own; that never waits for the GPU. Outputs the library allocated (those the caller
  // did not pass) are freed with cuMemFree, which does.
  std::shared_ptr<const LinearCeState> state;
};

// Caller-provided gradient outputs, in segment order (an empty vector: all allocated).
struct LinearCeGradOutputs {
  std::optional<TensorView> d_hidden;  // f32 [N, D], last dim contiguous
  // f32 [V_s, D], or E's dtype (bf16 / f16: half the memory; each entry the f32 result rounded
  // once to nearest even), last dim contiguous, even row stride
  std::vector<std::optional<TensorView>> d_weight;
  std::vector<std::optional<TensorView>> d_bias;  // f32 [V_s] contiguous (segments with bias)
};

struct LinearCeGradients {
  TensorView d_hidden;                            // f32 [N, D]; 0 on ignored rows
  std::vector<TensorView> d_weight;               // per segment (as given, else f32)
  std::vector<std::optional<TensorView>> d_bias;  // per segment, set when it has a bias
  // Filtering as it ran: the fraction of tiles that survived (1 with filtering off), of the
  // surviving tiles' 64-row halves the fraction computed (the rest are zero and skipped), and
  // whether they were visited in the forward's order. The fractions are -1 where no row is kept.
  double surviving_fraction = -1;
  double computed_half_fraction = -1;
  bool vocab_ordered = false;
  // What the library allocated: the outputs the caller did not give (the kernels may still be
  // running when the call returns). Drop it to free them. (The backward's scratch is freed in
  // `stream`'s order when the call returns.)
  std::shared_ptr<const void> storage;
};

LinearCeForward linear_cross_entropy_forward(const LossProgram& prog, const TensorView& hidden,
                                             const Bindings& segments_and_captures,
                                             const TensorView& targets,
                                             const LinearCeOptions& options, CUstream stream,
                                             const LinearCeOutputs& outputs = {},
                                             const LinearCeTeacher& teacher = {});

// `grad_loss`: f32 device, [N] for reduction none, one element otherwise (dL/dloss).
LinearCeGradients linear_cross_entropy_backward(const LinearCeForward& forward,
                                                const TensorView& grad_loss, CUstream stream,
                                                const LinearCeGradOutputs& outputs = {});

// The segments' tensors from `bind`, checked against the program and E (UserError otherwise).
std::vector<SegmentBinding> bind_segments(const LossProgram& prog, const TensorView& hidden,
                                          const Bindings& bind);

// UserError unless the GPU path supports `prog` (at most 4 segments; a teacher layout, if any,
// cut where the student's is).
void check_linear_ce_supported(const LossProgram& prog);

// Every kernel module `prog` needs for operands of `dtype` (bf16 or f16), as kernel-cache
// requests: what the CLI, the AOT bundler and the launches compile. Needs no GPU.
struct LinearCeModule {
  LossKernelSource source;
  KernelSpec spec;
};
// The forward's tile loop TILEJIT_CE_LOOP selects (see "Tile loop").
CeTileLoop linear_ce_tile_loop();
std::vector<LinearCeModule> linear_ce_modules(const LossProgram& prog, DType dtype,
                                              CeTileLoop loop = linear_ce_tile_loop());

}  // namespace tilejit
