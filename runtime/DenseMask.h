// dense_mask: an attention program's mask evaluated at every (b, h, q, kv) into a dense
// [B, H, Sq, Skv] uint8 tensor (1 = attend, 0 = masked). The interop and reference form of a
// mask; the block-sparse kernels never need it.
#pragma once

#include <cuda.h>

#include <string>
#include <vector>

#include "compiler/Program.h"
#include "compiler/codegen/CudaCodegen.h"
#include "runtime/Bindings.h"
#include "runtime/KernelCache.h"
#include "runtime/TensorView.h"

namespace tilejit {

// Writes the mask of `prog` into `out` (u8 or bool, [B, H, Sq, Skv], any strides, device
// memory) on `stream`; B, H, Sq and Skv are out's sizes. Compiles on first use for the current
// context's device (cached). Throws UserError for a bad program, binding or output tensor.
void dense_mask(const AttentionProgram& prog, const Bindings& bind, const TensorView& out,
                CUstream stream);

// Compile only (CLI, CI, AOT): the dense-mask kernel of `prog` for `arch` ("sm_80", "sm_90a"),
// through `cache`. Needs no GPU.
std::vector<CompiledKernel> compile_dense_mask(const AttentionProgram& prog,
                                               const std::string& arch,
                                               KernelCache& cache = KernelCache::global());

// The program dense_mask generates code from (validated and lowered), and its source.
AttentionProgram prepare_dense_mask(const AttentionProgram& prog);
CudaSource dense_mask_source(const AttentionProgram& prog);

// A generated translation unit as a kernel-cache request: the text of its embedded headers and
// of every embedded header they include, and the standard options.
KernelSpec kernel_spec(const CudaSource& source, std::string program_name);
// `names` and, transitively, the embedded templates they #include, each once.
std::vector<std::string> template_closure(const std::vector<std::string>& names);

}  // namespace tilejit
