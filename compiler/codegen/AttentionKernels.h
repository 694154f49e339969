// CUDA code generation for the block-sparse attention kernels (kernels_templates/
// attention_fwd.cuh, attention_fwd_sm90.cuh, attention_bwd.cuh, attention_bwd_sm90.cuh): the
// translation units an attention program needs, each
// a few extern "C" entry points that instantiate the hand-written templates' device bodies
// (<kernel>_cta) with the program's hooks, the variant's element type and head dim, and the
// templates' launch bounds.
//
// Seven modules per variant (element type bf16 / f16, head dim 64 / 128), so a forward-only
// caller compiles one, and what does not depend on the program is compiled once for all
// programs (the kernel cache keys on the source):
//
//   Forward                    attention_fwd                          program + variant
//   Backward                   attention_bwd (atomic dQ)              program + variant
//   BackwardDeterministic      attention_bwd_det, attention_bwd_dq    program + variant
//   BackwardRows               attention_bwd_preprocess,              variant
//                              attention_bwd_dq_convert
//   ForwardSm90                attention_fwd_sm90 (wgmma + TMA)       program + variant
//   BackwardSm90               attention_bwd_sm90 (atomic dQ)         program + variant
//   BackwardSm90Deterministic  attention_bwd_sm90_det,                program + variant
//                              attention_bwd_dq
//
// The Sm90 modules are for sm_90a devices (runtime/Attention.h picks them there); on any other
// target their wgmma entry points compile to a trap, so the module list does not depend on the
// architecture and a bundle built for several archs holds the same modules for each.
// A backward pass runs BackwardRows' preprocess, then Backward's (or BackwardSm90's) main
// kernel and BackwardRows' dq_convert (atomic mode), or BackwardDeterministic's (or
// BackwardSm90Deterministic's) two kernels (deterministic mode).
// Program modules name their entries tj_<kernel>_<bf16|f16>_d<D>_<hash16>, the shared one
// tj_<kernel>_<bf16|f16>_d<D>.
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

enum class AttentionModule : uint8_t {
  Forward,
  Backward,
  BackwardDeterministic,
  BackwardRows,
  ForwardSm90,
  BackwardSm90,
  BackwardSm90Deterministic
};

// What selects an attention kernel besides the program: the element type of Q, K, V (and of O,
// dO, dQ, dK, dV) and the head dim.
struct AttentionVariant {
  ElemType elem = ElemType::BF16;
  int head_dim = 128;
  // Generated for any size. Otherwise the hooks may assume b, h, q, kv < kPositionLimit
  // (compiler/codegen/PositionRange.h) and the runtime launches the kernels only on problems
  // that small (attention_variant in runtime/Attention.h); the suffix says "_long" when set.
  bool long_positions = false;
};

// A UserError listing what is supported unless `v` is bf16 or f16 with head dim 64 or 128.
void check_attention_variant(const AttentionVariant& v);
std::string variant_suffix(const AttentionVariant& v);  // "bf16_d128", "bf16_d128_long"

// Every module, in the order a forward + backward pass first needs them.
const std::vector<AttentionModule>& attention_modules();
std::string_view attention_module_name(AttentionModule m);  // "attention_fwd", ...
bool attention_module_uses_program(AttentionModule m);      // all but BackwardRows

struct AttentionKernelSource {
  AttentionModule module = AttentionModule::Forward;
  std::string variant;  // "attention_fwd bf16 d128"
  CudaSource cuda;      // cuda.entry: the module's first entry point
  // Kernel name ("attention_bwd_dq") -> extern "C" entry point.
  std::map<std::string, std::string, std::less<>> entries;
};

// The module's translation unit. `prog` is the lowered program (compiler/Lower.h) and
// `score_grad` its derivative; BackwardRows ignores both.
AttentionKernelSource generate_attention_module(const AttentionProgram& prog,
                                                const Expr& score_grad, AttentionModule module,
                                                const AttentionVariant& variant);

// Tile sizes every attention kernel is built for: a block mask must use these.
inline constexpr int kAttentionBlockQ = 128;
inline constexpr int kAttentionBlockKV = 64;

// Byte sizes of the templates' launch-parameter structs; generated modules assert them on the
// device side and runtime/Attention.cpp on its host mirrors. ForwardSm90 takes the forward's
// params, the program's TjArgs and then the Q, K, V and output tensor maps (four CUtensorMap);
// the BackwardSm90 kernels the backward's params, TjArgs and the Q, K, V, dO and dq_accum maps
// (five).
inline constexpr size_t kAttnFwdParamsBytes = 232;
inline constexpr size_t kAttnBwdParamsBytes = 384;
inline constexpr size_t kAttnFwdTmaMapsBytes = 512;
inline constexpr size_t kAttnBwdTmaMapsBytes = 640;
// Keys per CTA of the sm90 backward (two block-mask kv tiles): its grid is
// (B * Hkv, ceil(kv_tiles / 2)).
inline constexpr int kAttentionBwdSm90BlockKV = 128;

// How a kernel is launched: threads per CTA and dynamic shared memory (asserted by the
// generated code against the templates' own constants, so the two cannot drift apart).
struct AttentionLaunchShape {
  int threads = 0;
  int smem_bytes = 0;
};
// kernel: "attention_fwd", "attention_fwd_sm90", "attention_bwd", "attention_bwd_det",
// "attention_bwd_dq", "attention_bwd_preprocess", "attention_bwd_dq_convert",
// "attention_bwd_sm90", "attention_bwd_sm90_det".
AttentionLaunchShape attention_launch_shape(std::string_view kernel, int head_dim);

}  // namespace tilejit
