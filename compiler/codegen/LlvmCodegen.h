// LLVM IR for a program's hooks, as row loops the CPU executors call (runtime/cpu/RowHooks.h).
// Each generated function loops over a row segment with the hook expression inlined in the body,
// so LLVM's optimiser can hoist what does not depend on the column and vectorise the rest.
//
// Signatures (C calling convention; `args` is the TjArgs block of compiler/codegen/ArgLayout.h
// with host pointers, packed by runtime/Bindings.h pack_args):
//   <prefix>_score_row     (const u8* args, i32 b, i32 h, i32 q, i32 kv0, i32 n, float* s, i32
//   check_mask) <prefix>_score_grad_row(const u8* args, i32 b, i32 h, i32 q, i32 kv0, i32 n, const
//   float* raw, float* grad) <prefix>_mask_row      (const u8* args, i32 b, i32 h, i32 q, i32 kv0,
//   i32 n, u8* keep) <prefix>_logit_row     (const u8* args, i32 row, i32 id0, i32 n, float* x)
//   <prefix>_logit_grad_row(const u8* args, i32 row, i32 id0, i32 n, const float* raw, float* grad)
// with the meanings of AttentionRowHooks / LossRowHooks.
//
// Values follow compiler/IR.h and match the interpreter in FloatPrecision::F32 bit for bit:
// f32 operations are single precision, transcendentals call the C library in double precision and
// round (as the interpreter does), i32 division guards 0 and -1, casts saturate, and a load outside
// the bound shape yields 0. Loads are branch-free: an out-of-range load reads element 0 and
// discards it, so every bound buffer must have at least one element (the runtime points empty
// buffers at a zero sentinel).
#pragma once

#include <llvm/Support/Error.h>

#include <memory>
#include <string>
#include <string_view>

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tilejit {

struct LoweredAttention;
struct LoweredLoss;

// The symbol of one hook function: "<prefix>_<hook>", hook one of score_row, score_grad_row,
// mask_row, logit_row, logit_grad_row.
std::string llvm_hook_symbol(std::string_view prefix, std::string_view hook);

llvm::Expected<std::unique_ptr<llvm::Module>> emit_attention_row_hooks(
    llvm::LLVMContext& context, const LoweredAttention& program, std::string_view prefix);
llvm::Expected<std::unique_ptr<llvm::Module>> emit_loss_row_hooks(llvm::LLVMContext& context,
                                                                  const LoweredLoss& program,
                                                                  std::string_view prefix);

}  // namespace tilejit
