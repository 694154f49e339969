// CUDA code generation: a program becomes a small, readable translation unit that instantiates
// one hand-written kernel template (kernels_templates/) with the program's hooks.
//
//   #include "common.cuh"
//   #include "dense_mask.cuh"
//   struct TjArgs { TjBuffer<int, 2> doc; float cap; };          // captured values
//   struct TjProgram {                                            // the hooks
//     static constexpr bool kMaskIsTrue = false; ...
//     __device__ __forceinline__ static bool mask_mod(const TjArgs& a, int b, int h, int q,
//                                                    int kv) { ... }
//   };
//   extern "C" __global__ void tj_dense_mask_<hash16>(const __grid_constant__ DenseMaskParams p,
//                                                    const __grid_constant__ TjArgs a) {
//     dense_mask_kernel<TjProgram>(p, a);
//   }
//
// Hook bodies are SSA temporaries in post-order over the expression DAG (a shared node is
// computed once), one line per node, spelled from one table (CudaOps.h). Select arms are
// emitted inside if/else, so a node only one arm needs, and any buffer read in it, is evaluated
// only when that arm is taken. `#line` directives point back to the program. Each hook comes
// split into parts that kernels compute once for many elements -- an attention hook's q and kv
// parts, a loss hook's constant and row parts (HookSplit.h) -- and the rest reading them, plus
// the hook of its own arguments alone, which computes its parts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/Program.h"
#include "compiler/codegen/ArgLayout.h"

namespace tilejit {

// A kernel template and how the generated entry point instantiates it.
struct KernelTemplate {
  std::string_view variant;      // "dense_mask": names the entry point
  std::string_view header;       // "dense_mask.cuh"
  std::string_view params_type;  // the template's fixed launch parameters, "DenseMaskParams"
  std::string_view function;     // "dense_mask_kernel": template <class P> (params, TjArgs)
  std::vector<std::string_view> headers;  // embedded headers it needs (the runtime adds what
                                          // they include); common.cuh is always added
};

// A generated translation unit, ready for NVRTC.
struct CudaSource {
  std::string source;
  std::string entry;                 // extern "C" kernel name, "tj_dense_mask_0123456789abcdef"
  std::string file_name;             // "<entry>.cu", the NVRTC program name
  std::vector<std::string> headers;  // embedded headers to hand to NVRTC (kernels_templates/)
  ArgLayout layout;                  // of the TjArgs the entry point takes
};

// Pieces, for templates with their own glue.
std::string generate_args_struct(const ArgLayout& layout);
// With positions_bounded, the hooks may assume b, h, q, kv < kPositionLimit
// (compiler/codegen/PositionRange.h): for kernels the runtime launches only on such problems.
std::string generate_hooks(const AttentionProgram& prog, const Expr& score_grad,
                           bool positions_bounded = false);
std::string generate_hooks(const LossProgram& prog, const Expr& logit_grad);
// Whether score_mod evaluates, per element, an operation on the GPU's multi-function pipe (the
// one ex2.approx uses): a transcendental or a float division of something that reads score. The
// hooks say so as kScoreUsesXu; the Hopper forward then moves a share of its exponentials to the
// FMA pipe.
bool score_uses_xu(const Expr& score);

// A whole translation unit: includes, TjArgs, TjProgram, entry point.
CudaSource generate_kernel(const AttentionProgram& prog, const Expr& score_grad,
                           const KernelTemplate& tmpl);
CudaSource generate_kernel(const LossProgram& prog, const Expr& logit_grad,
                           const KernelTemplate& tmpl);

// The dense-mask kernel (kernels_templates/dense_mask.cuh).
const KernelTemplate& dense_mask_template();
CudaSource generate_dense_mask(const AttentionProgram& prog, const Expr& score_grad);

}  // namespace tilejit
