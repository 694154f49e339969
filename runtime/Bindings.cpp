#include "runtime/Bindings.h"

#include <fmt/format.h>

#include <cstring>

#include "compiler/Error.h"

namespace tilejit {

Bindings::Bindings(std::initializer_list<Binding> bindings) {
  for (const Binding& b : bindings) {
    TILEJIT_USER_CHECK(!find_buffer(b.name) && !find_param(b.name), "'{}' is bound twice", b.name);
    set(b);
  }
}

Bindings& Bindings::set(Binding binding) {
  buffers_.erase(binding.name);
  params_.erase(binding.name);
  if (auto* view = std::get_if<TensorView>(&binding.value))
    buffers_.insert_or_assign(binding.name, *view);
  else
    params_.insert_or_assign(binding.name, std::get<ScalarValue>(binding.value));
  return *this;
}

const TensorView* Bindings::find_buffer(std::string_view name) const {
  auto it = buffers_.find(name);
  return it == buffers_.end() ? nullptr : &it->second;
}

const ScalarValue* Bindings::find_param(std::string_view name) const {
  auto it = params_.find(name);
  return it == params_.end() ? nullptr : &it->second;
}

DType dtype_of(ElemType elem) {
  switch (elem) {
    case ElemType::I32: return DType::I32;
    case ElemType::F32: return DType::F32;
    case ElemType::BF16: return DType::BF16;
    case ElemType::F16: return DType::F16;
  }
  internal_error("unknown element type");
}

namespace {

std::string declared(const BufferDecl& d) {
  return fmt::format("{}[{}]", elem_type_name(d.elem), fmt::join(d.dims, ", "));
}

void check_buffer(std::string_view program, const BufferDecl& decl, const TensorView& view,
                  TensorView::Where where, std::map<std::string, int64_t>& dims,
                  std::map<std::string, std::string>& dim_source) {
  TILEJIT_USER_CHECK(view.dtype == dtype_of(decl.elem),
                     "program {}: buffer '{}' is declared {} but bound to a {} tensor ({})",
                     program, decl.name, declared(decl), dtype_name(view.dtype), view.describe());
  TILEJIT_USER_CHECK(view.rank() == static_cast<int>(decl.dims.size()),
                     "program {}: buffer '{}' is declared {} (rank {}) but bound to a tensor of "
                     "rank {} ({})",
                     program, decl.name, declared(decl), decl.dims.size(), view.rank(),
                     view.describe());
  TILEJIT_USER_CHECK(view.strides.size() == view.shape.size(),
                     "program {}: buffer '{}' has {} strides for {} dimensions", program, decl.name,
                     view.strides.size(), view.shape.size());
  TILEJIT_USER_CHECK(view.where == where, "program {}: buffer '{}' must be in {} memory ({})",
                     program, decl.name, where == TensorView::Where::Device ? "device" : "host",
                     view.describe());
  for (size_t d = 0; d < decl.dims.size(); ++d) {
    const std::string& dim = decl.dims[d];
    int64_t size = view.shape[d];
    TILEJIT_USER_CHECK(size >= 0, "program {}: buffer '{}' has a negative size", program,
                       decl.name);
    TILEJIT_USER_CHECK(size > 0 ? view.data != nullptr : true,
                       "program {}: buffer '{}' is bound to a null pointer", program, decl.name);
    auto [it, inserted] = dims.emplace(dim, size);
    if (inserted) {
      dim_source[dim] = decl.name;
      continue;
    }
    TILEJIT_USER_CHECK(it->second == size,
                       "program {}: dimension '{}' is {} in buffer '{}' but {} in buffer '{}'",
                       program, dim, it->second, dim_source[dim], size, decl.name);
  }
}

}  // namespace

std::map<std::string, int64_t> check_bindings(std::string_view program,
                                              const std::vector<BufferDecl>& buffers,
                                              const std::vector<ParamDecl>& params,
                                              const Bindings& bind, TensorView::Where where) {
  std::map<std::string, int64_t> dims;
  std::map<std::string, std::string> dim_source;
  for (const BufferDecl& decl : buffers) {
    const TensorView* view = bind.find_buffer(decl.name);
    TILEJIT_USER_CHECK(!bind.find_param(decl.name),
                       "program {}: buffer '{}' is bound to a scalar, not a tensor", program,
                       decl.name);
    TILEJIT_USER_CHECK(view, "program {}: buffer '{}' ({}) is not bound", program, decl.name,
                       declared(decl));
    check_buffer(program, decl, *view, where, dims, dim_source);
  }
  for (const ParamDecl& decl : params) {
    TILEJIT_USER_CHECK(!bind.find_buffer(decl.name),
                       "program {}: param '{}' is bound to a tensor, not a scalar", program,
                       decl.name);
    const ScalarValue* value = bind.find_param(decl.name);
    TILEJIT_USER_CHECK(value, "program {}: param '{}' ({}) is not bound", program, decl.name,
                       type_name(decl.type));
    TILEJIT_USER_CHECK(decl.type == Type::F32 || std::holds_alternative<int32_t>(*value),
                       "program {}: param '{}' is i32 but bound to the float {}", program,
                       decl.name, std::get<float>(*value));
  }
  auto known = [&](const std::string& name) {
    for (const BufferDecl& d : buffers)
      if (d.name == name) return true;
    for (const ParamDecl& d : params)
      if (d.name == name) return true;
    return false;
  };
  for (const auto& [name, view] : bind.buffers())
    TILEJIT_USER_CHECK(known(name),
                       "program {}: '{}' is bound but the program declares no such "
                       "buffer or param",
                       program, name);
  for (const auto& [name, value] : bind.params())
    TILEJIT_USER_CHECK(known(name),
                       "program {}: '{}' is bound but the program declares no such "
                       "buffer or param",
                       program, name);
  return dims;
}

std::vector<unsigned char> pack_args(const ArgLayout& layout, const Bindings& bind) {
  std::vector<unsigned char> bytes(layout.size, 0);
  auto put = [&](size_t offset, const auto& v) {
    TILEJIT_INTERNAL_CHECK(offset + sizeof v <= bytes.size(), "TjArgs field out of range");
    std::memcpy(bytes.data() + offset, &v, sizeof v);
  };
  for (const ArgField& f : layout.fields) {
    if (f.kind == ArgField::Kind::Buffer) {
      const TensorView* view = bind.find_buffer(f.name);
      TILEJIT_INTERNAL_CHECK(view && view->rank() == f.rank, "buffer {} not checked", f.name);
      put(f.offset, view->data);
      for (int d = 0; d < f.rank; ++d) {
        put(f.offset + buffer_size_offset(d), static_cast<long long>(view->shape[d]));
        put(f.offset + buffer_stride_offset(f.rank, d), static_cast<long long>(view->strides[d]));
      }
      continue;
    }
    const ScalarValue* value = bind.find_param(f.name);
    TILEJIT_INTERNAL_CHECK(value, "param {} not checked", f.name);
    if (f.kind == ArgField::Kind::ParamF32) {
      float v = std::holds_alternative<float>(*value)
                    ? std::get<float>(*value)
                    : static_cast<float>(std::get<int32_t>(*value));
      put(f.offset, v);
    } else {
      put(f.offset, static_cast<int32_t>(std::get<int32_t>(*value)));
    }
  }
  return bytes;
}

}  // namespace tilejit
