#include "compiler/codegen/ArgLayout.h"

#include <algorithm>

#include "compiler/Error.h"

namespace tilejit {

namespace {
size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
}  // namespace

const ArgField* ArgLayout::find(std::string_view name) const {
  for (const ArgField& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

ArgLayout arg_layout(const std::vector<BufferDecl>& buffers, const std::vector<ParamDecl>& params) {
  ArgLayout layout;
  size_t offset = 0;
  size_t alignment = 1;
  auto place = [&](ArgField f, size_t size, size_t align) {
    offset = align_up(offset, align);
    f.offset = offset;
    f.size = size;
    offset += size;
    alignment = std::max(alignment, align);
    layout.fields.push_back(std::move(f));
  };
  for (const BufferDecl& b : buffers) {
    int rank = static_cast<int>(b.dims.size());
    place({.name = b.name,
           .kind = ArgField::Kind::Buffer,
           .elem = b.elem,
           .rank = rank,
           .dims = b.dims},
          8 + 16 * static_cast<size_t>(rank), 8);
  }
  for (const ParamDecl& p : params) {
    TILEJIT_INTERNAL_CHECK(p.type == Type::F32 || p.type == Type::I32,
                           "param {} has type {}; params are f32 or i32", p.name,
                           type_name(p.type));
    ArgField f;
    f.name = p.name;
    f.kind = p.type == Type::F32 ? ArgField::Kind::ParamF32 : ArgField::Kind::ParamI32;
    place(std::move(f), 4, 4);
  }
  layout.alignment = alignment;
  layout.size = layout.fields.empty() ? 1 : align_up(offset, alignment);
  return layout;
}

}  // namespace tilejit
