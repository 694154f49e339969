// Row hooks compiled to native code: compiler/codegen/LlvmCodegen.h emits the row loops as LLVM
// IR, optimised at O3 for the host CPU and JIT-compiled with ORC LLJIT. Compiled code is kept in
// memory per program hash, so binding new values (or a new program object with the same
// structure) never recompiles. Only built when tilejit has LLVM (TILEJIT_HAVE_LLVM).
#pragma once

#include <memory>

#include "runtime/cpu/RowHooks.h"

namespace tilejit {

// LLVM failures become InternalErrors carrying LLVM's message.
std::unique_ptr<AttentionRowHooks> make_llvm_row_hooks(const LoweredAttention& program,
                                                       const Bindings& bind);
std::unique_ptr<LossRowHooks> make_llvm_row_hooks(const LoweredLoss& program,
                                                  const Bindings& bind);

// Forgets every compiled program (benchmarks measure compile time with it); hooks already made
// stay valid.
void clear_llvm_hook_cache();

}  // namespace tilejit
