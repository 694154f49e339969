// CUDA code generation for the fused linear cross-entropy kernels (kernels_templates/
// linear_ce_*.cuh): the translation units a loss program needs, each a few extern "C" entry
// points that instantiate the hand-written templates.
//
// The kernels come in four modules, so that what does not depend on the program is compiled
// once and shared by every loss program (the kernel cache keys on the source):
//
//   Forward   linear_ce_fwd                          program + element type (bf16 / f16)
//   Gradient  linear_ce_grad, linear_ce_target_grad  program + element type
//             (a program with a KL term gets linear_ce_fwd_kl, linear_ce_grad_kl and
//             linear_ce_target_grad_kl instead: the teacher's tiles recomputed alongside)
//   Products  linear_ce_dhidden / dweight / dbias    element type
//   Rows      target checks, row compaction, merge, reductions, tile classification, the
//             vocabulary order's pre-pass, ...
//
// Program modules carry the generated TjArgs and TjProgram (CudaCodegen.h) and name their
// entries tj_<kernel>_<bf16|f16>_<hash16>; the others are tj_<kernel>_<bf16|f16> and
// tj_<kernel>. Entry points carry the templates' launch bounds (register budgets the kernels
// were tuned for), which is why these modules have their own glue rather than KernelTemplate's
// single (params, TjArgs) entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/Program.h"
#include "compiler/codegen/CudaCodegen.h"

namespace tilejit {

enum class LossModule : uint8_t { Forward, Gradient, Products, Rows };

// The tile loop of the tensor-core kernels (linear_ce_fwd and linear_ce_fwd_kl, linear_ce_grad and
// linear_ce_grad_kl; the products linear_ce_dhidden and linear_ce_dweight): the portable one
// (mma.sync, sm_80+) or the Hopper one (wgmma, kernels_templates/ce_wgmma.cuh). The choice is part
// of the Forward, Gradient and Products modules' source, so the kernel cache keys on it; a module
// asking for Sm90 compiled for any target other than sm_90a runs the portable loop. The runtime
// launches the Hopper loop's shapes (kCe*Sm90* below) for sm_90a modules only.
enum class CeTileLoop : uint8_t { Portable, Sm90 };

// Every module, in the order a forward + backward pass first needs them.
const std::vector<LossModule>& loss_modules();
std::string_view loss_module_name(LossModule m);  // "linear_ce_fwd", ..., "linear_ce_rows"
bool loss_module_uses_program(LossModule m);      // Forward, Gradient
bool loss_module_uses_elem(LossModule m);         // Forward, Gradient, Products

struct LossKernelSource {
  LossModule module = LossModule::Rows;
  std::string variant;  // "linear_ce_fwd bf16", "linear_ce_rows"
  CudaSource cuda;      // cuda.entry: the module's first entry point
  // Kernel name ("linear_ce_merge") -> extern "C" entry point ("tj_linear_ce_merge").
  std::map<std::string, std::string, std::less<>> entries;
};

// The module's translation unit. `prog` is the lowered program (compiler/Lower.h) and
// `logit_grad` its derivative; `elem` is BF16 or F16 (the element type of E and the weights).
// Modules that do not use the program or the element type ignore them; the Rows module ignores
// `loop`.
LossKernelSource generate_loss_module(const LossProgram& prog, const Expr& logit_grad,
                                      LossModule module, ElemType elem,
                                      CeTileLoop loop = CeTileLoop::Portable);

// Byte sizes of the templates' launch-parameter structs. Every generated module asserts them
// on the device side and runtime/LinearCe.cpp asserts them on its host mirrors, so a layout
// change on either side fails a build (the NVRTC compile in CI, or the host compile).
inline constexpr size_t kCeLayoutBytes = 368;
inline constexpr size_t kCeFwdParamsBytes = 928;
inline constexpr size_t kCeFwdMapsBytes = 640;
inline constexpr size_t kCeKlMapsBytes = 1280;
inline constexpr size_t kCeBwdMapsBytes = 896;
inline constexpr int kCeFwdRows = 256;  // the forward's row tile: its TMA box (runtime/LinearCeTma.h)
inline constexpr int kCeKlRows = 128;  // a KL pair's (forward and gradient tiles), likewise
inline constexpr size_t kCeMergeParamsBytes = 152;
// linear_ce_merge's blocks: kCeMergeRows rows x kCeMergeThreads threads (asserted likewise)
inline constexpr int kCeMergeRows = 32, kCeMergeThreads = 256;
// The vocabulary order's radix sort: blocks of kCeRadixThreads threads over kCeRadixItems items
// each, one byte (kCeRadixDigits digits) per pass (asserted likewise)
inline constexpr int kCeRadixThreads = 256, kCeRadixItems = 2048, kCeRadixDigits = 256;
// linear_ce_average_logit's blocks: 256 threads over kCeAverageLogitRows weight rows (likewise)
inline constexpr int kCeAverageLogitRows = 32;
inline constexpr size_t kCeClassifyParamsBytes = 456;
inline constexpr size_t kCeBwdParamsBytes = 1072;
// Launch shapes of the tensor-core kernels (threads, dynamic shared memory), asserted likewise.
inline constexpr int kCeFwdThreads = 256, kCeFwdSmemBytes = 147456;          // CeFwdCta
// CeFwdWsCta: the Hopper loop's forward on sm_90a
inline constexpr int kCeFwdSm90Threads = 384, kCeFwdSm90SmemBytes = 196608;
inline constexpr int kCeKlFwdThreads = 256, kCeKlFwdSmemBytes = 98304;       // CeKlFwdCta
// CeKlWsCta: the KL forward on the Hopper loop on sm_90a
inline constexpr int kCeKlFwdSm90Threads = 384, kCeKlFwdSm90SmemBytes = 196608;
inline constexpr int kCeGradThreads = 256, kCeGradSmemBytes = 98304;         // CeGradCta
// CeGradPingpongCta: the gradient tiles on the Hopper loop on sm_90a (persistent, one per SM)
inline constexpr int kCeGradSm90Threads = 384, kCeGradSm90SmemBytes = 196608;
// CeGradKlWsCta: a KL program's gradient tiles on the Hopper loop (persistent, one per SM)
inline constexpr int kCeGradKlSm90Threads = 384, kCeGradKlSm90SmemBytes = 229376;
inline constexpr int kCeProductThreads = 256, kCeProductSmemBytes = 147456;  // CeProductCta
// CeProductWsCta: the products on the Hopper loop on sm_90a
inline constexpr int kCeProductSm90Threads = 384, kCeProductSm90SmemBytes = 196608;
// linear_ce_dweight_cold's CeColdCta (the vocabulary tiles no row tile visits)
inline constexpr int kCeColdThreads = 128, kCeColdSmemBytes = 69632;

}  // namespace tilejit
