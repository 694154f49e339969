// Mask analysis on the GPU: the interval lowering of the mask (compiler/codegen/
// IntervalCodegen.h) run over every tile, one thread per tile, after one summary kernel per i32
// buffer the mask reads (block min/max along the axis q or kv indexes). The tile classes come
// back to the host and become a BlockMask. Sound like the CPU analysis (runtime/MaskAnalysis.h);
// f32 sub-expressions are not tracked on the GPU, and summaries have block granularity, so a
// few tiles the CPU decides may stay partial here.
#pragma once

#include <cuda.h>

#include "compiler/Lower.h"
#include "runtime/Bindings.h"
#include "runtime/BlockMask.h"

namespace tilejit {

// `device_bindings` binds the program's buffers in device memory (and its params). Needs a GPU
// (UserError otherwise); synchronises `stream` before returning.
BlockMask analyse_block_mask_gpu(const LoweredAttention& lowered, const Bindings& device_bindings,
                                 const BlockMaskShape& shape, CUstream stream = nullptr);

}  // namespace tilejit
