// Mask analysis on the CPU: a BlockMask from a program's mask without O(S^2) work.
//
// Each tile is classified by evaluating the mask over the whole tile at once
// (compiler/IntervalEval.h), buffer reads answered by buffer summaries built in one O(size)
// pass (compiler/BufferSummary.h). A q-tile row is classified by bisection over its kv tiles:
// a range of tiles that evaluates to TRUE or FALSE is one full run or nothing, only MAYBE
// ranges are split, so a row costs O(class changes * log kv_tiles) evaluations, not
// O(kv_tiles), and memory stays O(runs). Index-only masks (causal, windows, prefix-LM,
// chunked, image blocks) and buffer equalities with sorted ids (documents) classify exactly.
// With `refine_partial`, tiles left MAYBE are evaluated elementwise, so every verdict is exact
// at O(elements of those tiles).
//
// Extents: the mask's batch extent is shape.batch when the mask reads b and 1 (broadcast)
// otherwise; the same for heads and h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compiler/Interpreter.h"
#include "compiler/Lower.h"
#include "runtime/Bindings.h"
#include "runtime/BlockMask.h"

namespace tilejit {

struct AnalysisOptions {
  bool refine_partial = false;  // evaluate MAYBE tiles elementwise (exact verdicts)
  int threads = 0;              // q-tile rows classified in parallel; 0 = all cores
};

struct AnalysisStats {
  int64_t box_evaluations = 0;  // interval evaluations (boxes of one or more tiles)
  int64_t refined_tiles = 0;    // tiles evaluated elementwise
  size_t summary_bytes = 0;     // memory of the buffer summaries
  double summary_seconds = 0;   // building the buffer summaries
  double classify_seconds = 0;  // classifying the rows into runs
  double build_seconds = 0;     // assembling the BlockMask (forward and transposed lists)
};

// `host_bindings` binds the program's buffers (host memory) and params; shape.batch / heads
// are the tensors' extents (reduced to 1 where the mask does not depend on them).
BlockMask analyse_block_mask(const LoweredAttention& lowered, const Bindings& host_bindings,
                             const BlockMaskShape& shape, const AnalysisOptions& options = {},
                             AnalysisStats* stats = nullptr);

// The same from a mask expression and the interpreter's bindings (its buffers and params).
BlockMask analyse_block_mask(const Expr& mask, const EvalContext& bindings,
                             const BlockMaskShape& shape, const AnalysisOptions& options = {},
                             AnalysisStats* stats = nullptr);

// The elementwise reference: every in-range element of every tile evaluated (CompiledEval),
// O(S^2). Same extents as analyse_block_mask. For tests and small shapes.
BlockMask reference_block_mask(const LoweredAttention& lowered, const Bindings& host_bindings,
                               const BlockMaskShape& shape);
BlockMask reference_block_mask(const Expr& mask, const EvalContext& bindings,
                               const BlockMaskShape& shape);

// The mask's own extents for `shape`: batch / heads set to 1 where the mask does not read b / h.
BlockMaskShape mask_extents(const Expr& mask, BlockMaskShape shape);

// The interpreter's bindings for host-memory Bindings (checked against the program).
EvalContext host_eval_context(const AttentionProgram& program, const Bindings& host_bindings);

}  // namespace tilejit
