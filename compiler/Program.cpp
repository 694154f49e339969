#include "compiler/Program.h"

#include <algorithm>

namespace tilejit {

namespace {
template <typename Decls>
auto find_named(const Decls& decls, std::string_view n) -> decltype(&decls[0]) {
  for (const auto& d : decls)
    if (d.name == n) return &d;
  return nullptr;
}
}  // namespace

AttentionProgram::AttentionProgram()
    : mask(ir::make_bool(true)), score(ir::make_var(var::score)) {}

const BufferDecl* AttentionProgram::find_buffer(std::string_view n) const {
  return find_named(buffers, n);
}
const ParamDecl* AttentionProgram::find_param(std::string_view n) const {
  return find_named(params, n);
}

LossProgram::LossProgram() : logit(ir::make_var(var::logit)) {}

const BufferDecl* LossProgram::find_buffer(std::string_view n) const {
  return find_named(buffers, n);
}
const ParamDecl* LossProgram::find_param(std::string_view n) const {
  return find_named(params, n);
}

int64_t LossProgram::vocab_end() const {
  int64_t end = 0;
  for (const Segment& s : segments) end = std::max(end, s.end);
  return end;
}

int64_t LossProgram::live_ids() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.size();
  return n;
}

std::string_view reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None: return "none";
    case Reduction::Sum: return "sum";
    case Reduction::Mean: return "mean";
  }
  return "?";
}

}  // namespace tilejit
