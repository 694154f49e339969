// The C ABI's programs (text form, standard library, canonical text and hash, a loss program's
// reduction and segments), version and GPU query.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>
#include <vector>

#include "ErrorBoundary.h"
#include "Handles.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "dsl/Stdlib.h"
#include "dsl/TextForm.h"
#include "runtime/Driver.h"
#include "runtime/Version.h"

using namespace tilejit;
using namespace tilejit::capi;

namespace {

// Lowering validates (and simplifies) once, here: a program that fails is a validation error.
template <class Program>
std::unique_ptr<tj_program> make_program(Program program) {
  auto handle = std::make_unique<tj_program>();
  handle->name = program.name;
  handle->lowered = retag_user_errors(TJ_ERR_VALIDATION, [&] { return lower(program); });
  handle->text = print_program(program);
  handle->hash = program_hash(program);
  handle->program = std::move(program);
  return handle;
}

tj_program* release_program(ParsedProgram parsed) {
  return std::visit([](auto& p) { return make_program(std::move(p)).release(); }, parsed);
}

// The query functions: a non-NULL program, a non-NULL out-pointer, one value.
template <class T, class Get>
tj_status query(const char* function, const tj_program* program, T* out, Get get) {
  return boundary(function, program_name(program),
                  [&] { out_param(out, "out") = get(program_handle(program)); });
}

}  // namespace

extern "C" {

const char* tj_version(void) {
  static const std::string kVersion(tilejit::version());
  return kVersion.c_str();
}

int tj_gpu_available(void) {
  try {
    return gpu_available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

tj_status tj_program_from_text(const char* text, const char* filename, tj_program** out) {
  if (out) *out = nullptr;
  return boundary("tj_program_from_text", [&] {
    tj_program*& result = out_param(out, "out");
    if (!text) fail(TJ_ERR_INVALID_ARGUMENT, "the program text is NULL");
    // A ParseError keeps TJ_ERR_PARSE; the builders' own checks are validation.
    ParsedProgram parsed = retag_user_errors(
        TJ_ERR_VALIDATION, [&] { return parse_program(text, filename ? filename : "<input>"); });
    result = release_program(std::move(parsed));
  });
}

tj_status tj_program_from_stdlib(const char* name, tj_program** out) {
  if (out) *out = nullptr;
  return boundary("tj_program_from_stdlib", [&] {
    tj_program*& result = out_param(out, "out");
    if (!name) fail(TJ_ERR_INVALID_ARGUMENT, "the program name is NULL");
    std::vector<std::string> names;
    for (AttentionProgram& p : stdlib::standard_attention_programs()) {
      if (p.name == name) {
        result = make_program(std::move(p)).release();
        return;
      }
      names.push_back(p.name);
    }
    for (LossProgram& p : stdlib::standard_loss_programs()) {
      if (p.name == name) {
        result = make_program(std::move(p)).release();
        return;
      }
      names.push_back(p.name);
    }
    fail(TJ_ERR_INVALID_ARGUMENT, "no standard program named '{}' (there are: {})", name,
         fmt::join(names, ", "));
  });
}

void tj_program_destroy(tj_program* program) { delete program; }

tj_status tj_program_kind_of(const tj_program* program, tj_program_kind* kind) {
  return query("tj_program_kind_of", program, kind, [](const tj_program& p) {
    return std::holds_alternative<AttentionProgram>(p.program) ? TJ_PROGRAM_ATTENTION
                                                               : TJ_PROGRAM_LOSS;
  });
}

tj_status tj_program_name(const tj_program* program, const char** name) {
  return query("tj_program_name", program, name,
               [](const tj_program& p) { return p.name.c_str(); });
}

tj_status tj_program_text(const tj_program* program, const char** text) {
  return query("tj_program_text", program, text,
               [](const tj_program& p) { return p.text.c_str(); });
}

tj_status tj_program_hash(const tj_program* program, const char** hash) {
  return query("tj_program_hash", program, hash,
               [](const tj_program& p) { return p.hash.c_str(); });
}

tj_status tj_program_segment_count(const tj_program* program, int32_t* count) {
  return boundary("tj_program_segment_count", program_name(program), [&] {
    int32_t& result = out_param(count, "count");
    result = static_cast<int32_t>(loss_program(program).segments.size());
  });
}

tj_status tj_program_reduction(const tj_program* program, tj_reduction* reduction) {
  return boundary("tj_program_reduction", program_name(program), [&] {
    tj_reduction& result = out_param(reduction, "reduction");
    switch (loss_program(program).reduction) {
      case Reduction::None: result = TJ_REDUCTION_NONE; return;
      case Reduction::Sum: result = TJ_REDUCTION_SUM; return;
      case Reduction::Mean: result = TJ_REDUCTION_MEAN; return;
    }
    fail(TJ_ERR_INTERNAL, "program '{}' has a reduction outside none, sum and mean",
         program_name(program));
  });
}

tj_status tj_program_segment(const tj_program* program, int32_t index, tj_segment_info* info) {
  return boundary("tj_program_segment", program_name(program), [&] {
    tj_segment_info& result = out_param(info, "info");
    const LossProgram& loss = loss_program(program);
    if (index < 0 || static_cast<size_t>(index) >= loss.segments.size())
      fail(TJ_ERR_INVALID_ARGUMENT, "program '{}' has {} segment(s): index {} is out of range",
           loss.name, loss.segments.size(), index);
    const Segment& s = loss.segments[static_cast<size_t>(index)];
    result = {s.name.c_str(), s.begin, s.end, s.weight.c_str(),
              s.bias.empty() ? nullptr : s.bias.c_str()};
  });
}

}  // extern "C"
