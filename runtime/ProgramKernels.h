// Every kernel a program needs, as kernel-cache requests: the list the CLI's `compile`, the AOT
// bundler and the launch paths share, so "compiled ahead" and "needed at run time" can never
// disagree.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/CudaCodegen.h"
#include "dsl/TextForm.h"
#include "runtime/KernelCache.h"
#include "runtime/TensorView.h"

namespace tilejit {

// What selects a kernel besides the program: input dtype and head dim (attention).
struct KernelVariantOptions {
  DType dtype = DType::BF16;
  int head_dim = 128;
};

struct ProgramKernel {
  std::string variant;  // "dense_mask", "attention_fwd bf16 d128", ...
  CudaSource source;
  KernelSpec spec;
};

std::vector<ProgramKernel> program_kernels(const ParsedProgram& program,
                                           const KernelVariantOptions& options = {});

struct CompiledKernelReport {
  std::shared_ptr<const CompiledKernel> kernel;
  std::string how;  // "compiled", "memory hit", "disk hit"
};
// Through the process-wide cache (TILEJIT_OFFLINE=1: a miss is an OfflineMiss).
CompiledKernelReport compile_program_kernel(const ProgramKernel& kernel, const std::string& arch);

}  // namespace tilejit
