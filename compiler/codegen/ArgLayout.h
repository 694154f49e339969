// The byte layout of `struct TjArgs`, the captured values a generated kernel receives as one
// __grid_constant__ parameter. Codegen emits the struct from this layout and the runtime packs
// bound tensors and scalars into it, so neither side inspects expressions and both agree by
// construction.
//
// Layout (fixed; changing it changes every generated kernel):
//   - buffers first, in declaration order, each a TjBuffer<T, RANK>:
//       { const T* ptr; long long size[RANK]; long long stride[RANK]; }   (8 + 16*RANK bytes,
//     8-byte aligned; strides in elements; RANK 0 is just the pointer);
//   - then params, in declaration order: float or int (4 bytes, 4-byte aligned);
//   - natural alignment, total size rounded up to the largest alignment. An empty TjArgs has
//     size 1 (as a C++ empty struct does).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "compiler/Program.h"

namespace tilejit {

struct ArgField {
  enum class Kind { Buffer, ParamF32, ParamI32 };
  std::string name;  // the declared name
  Kind kind = Kind::Buffer;
  ElemType elem = ElemType::I32;  // buffers only
  int rank = 0;                   // buffers only
  std::vector<std::string> dims;  // buffers only: the declared dimension names
  size_t offset = 0;
  size_t size = 0;
};

struct ArgLayout {
  std::vector<ArgField> fields;  // buffers then params, in declaration order
  size_t size = 1;
  size_t alignment = 1;

  const ArgField* find(std::string_view name) const;
};

ArgLayout arg_layout(const std::vector<BufferDecl>& buffers, const std::vector<ParamDecl>& params);
inline ArgLayout arg_layout(const AttentionProgram& p) { return arg_layout(p.buffers, p.params); }
inline ArgLayout arg_layout(const LossProgram& p) { return arg_layout(p.buffers, p.params); }

// Offsets inside one TjBuffer field.
inline size_t buffer_size_offset(int dim) { return 8 + 8 * static_cast<size_t>(dim); }
inline size_t buffer_stride_offset(int rank, int dim) {
  return 8 + 8 * static_cast<size_t>(rank) + 8 * static_cast<size_t>(dim);
}

}  // namespace tilejit
