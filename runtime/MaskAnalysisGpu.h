// Mask analysis on the GPU: the interval lowering of the mask (compiler/codegen/
// IntervalCodegen.h) run by one thread per q-tile row, bisecting the row's kv tiles as the CPU
// analysis does (kernels_templates/row_bisection.cuh), after one range table per i32 buffer the
// mask reads (block min/max along the axis q or kv indexes, and a sparse table over the blocks,
// so a box of many tiles reads a buffer in O(1) per row of it). Work is O(class changes *
// log kv_tiles) per row; the runs are compacted on the device (counts, offsets from the host,
// runs), so what comes back is O(rows + runs) bytes, never O(tiles). Sound like the CPU analysis
// (runtime/MaskAnalysis.h); f32 sub-expressions are not tracked on the GPU, and summaries have
// block granularity, so a few tiles the CPU decides may stay partial here.
#pragma once

#include <cuda.h>

#include "compiler/Lower.h"
#include "runtime/Bindings.h"
#include "runtime/BlockMask.h"

namespace tilejit {

// `device_bindings` binds the program's buffers in device memory (and its params). Needs a GPU
// (UserError otherwise). Kernels and copies run on `stream`, after the work already queued on
// it (the buffers' producers), and the host waits for `stream` alone before returning, since
// the runs come back to host memory (freeing the scratch, cuMemFree may still wait for the
// device as the driver does).
BlockMask analyse_block_mask_gpu(const LoweredAttention& lowered, const Bindings& device_bindings,
                                 const BlockMaskShape& shape, CUstream stream = nullptr);

}  // namespace tilejit
