#include "Handles.h"

namespace tilejit::capi {

std::string_view program_name(const tj_program* program) {
  return program ? std::string_view(program->name) : std::string_view();
}

const tj_program& program_handle(const tj_program* program) {
  if (!program) fail(TJ_ERR_INVALID_ARGUMENT, "the program is NULL");
  return *program;
}

namespace {

[[noreturn]] void wrong_kind(const tj_program& p, const char* is, const char* needed) {
  fail(TJ_ERR_INVALID_ARGUMENT, "program '{}' is {} program; this call needs {} program", p.name,
       is, needed);
}

}  // namespace

const AttentionProgram& attention_program(const tj_program* program) {
  const tj_program& p = program_handle(program);
  const auto* a = std::get_if<AttentionProgram>(&p.program);
  if (!a) wrong_kind(p, "a loss", "an attention");
  return *a;
}

const LoweredAttention& lowered_attention(const tj_program* program) {
  attention_program(program);
  return std::get<LoweredAttention>(program->lowered);
}

const LossProgram& loss_program(const tj_program* program) {
  const tj_program& p = program_handle(program);
  const auto* l = std::get_if<LossProgram>(&p.program);
  if (!l) wrong_kind(p, "an attention", "a loss");
  return *l;
}

const Bindings& bindings_of(const tj_bindings* bindings) {
  static const Bindings kNone;
  return bindings ? bindings->values : kNone;
}

}  // namespace tilejit::capi
