// What the C ABI's opaque handles hold, and the checked accessors every entry point uses to
// reach them (a NULL handle or a program of the wrong kind is TJ_ERR_INVALID_ARGUMENT).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ErrorBoundary.h"
#include "LinearCeCall.h"
#include "compiler/Lower.h"
#include "compiler/Program.h"
#include "runtime/Bindings.h"
#include "runtime/BlockMask.h"
#include "runtime/VocabOrder.h"
#include "tilejit.h"

struct tj_program {
  std::variant<tilejit::LoweredAttention, tilejit::LoweredLoss> lowered;
  std::variant<tilejit::AttentionProgram, tilejit::LossProgram> program;  // as written
  std::string name, text, hash;  // computed once: the handle is read-only after creation
};

struct tj_bindings {
  tilejit::Bindings values;
  std::map<std::string, int, std::less<>> device_of;  // CUDA ordinal of each device buffer
};

struct tj_block_mask {
  tilejit::BlockMask mask;
};

struct tj_linear_ce_state {
  std::unique_ptr<tilejit::capi::LinearCeRun> run;
  std::string program_name;
  std::vector<tilejit::Segment> segments;  // the program's, to name the gradients
  std::vector<bool> d_weight_given;        // per segment: the forward was given its gradient
  int device = TJ_HOST;                    // where the forward ran
};

struct tj_vocab_order {
  std::shared_ptr<tilejit::VocabOrder> order;
};

namespace tilejit::capi {

// The program's name for error messages ("" for NULL).
std::string_view program_name(const tj_program* program);

// A non-NULL program; attention_program / loss_program also check its kind.
const tj_program& program_handle(const tj_program* program);
const AttentionProgram& attention_program(const tj_program* program);
const LoweredAttention& lowered_attention(const tj_program* program);
const LossProgram& loss_program(const tj_program* program);

// The bindings' values (empty for NULL).
const Bindings& bindings_of(const tj_bindings* bindings);

// A required out-parameter pointer: TJ_ERR_INVALID_ARGUMENT naming it when NULL.
template <class T>
T& out_param(T* p, const char* name) {
  if (!p) fail(TJ_ERR_INVALID_ARGUMENT, "the output pointer '{}' is NULL", name);
  return *p;
}

}  // namespace tilejit::capi
