// Bindings: the values a launch gives a program's captured buffers and params, by name, checked
// against the program's declarations and packed into the TjArgs a generated kernel takes
// (compiler/codegen/ArgLayout.h).
//
//   Bindings bind{{"doc", doc_ids}, {"cap", 30.0f}};
//   dense_mask(prog, bind, out, stream);
//
// Changing a bound value or a tensor's shape never recompiles: only the program's structure
// selects a kernel.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "compiler/Program.h"
#include "compiler/codegen/ArgLayout.h"
#include "runtime/TensorView.h"

namespace tilejit {

// A runtime scalar: an f32 param takes a float (or an int, converted), an i32 param an int.
using ScalarValue = std::variant<float, int32_t>;

// One named value: {"doc", view}, {"cap", 30.0f}, {"window", 256}.
struct Binding {
  Binding(std::string name, TensorView view) : name(std::move(name)), value(std::move(view)) {}
  Binding(std::string name, float v) : name(std::move(name)), value(ScalarValue(v)) {}
  Binding(std::string name, double v)
      : name(std::move(name)), value(ScalarValue(static_cast<float>(v))) {}
  Binding(std::string name, int32_t v) : name(std::move(name)), value(ScalarValue(v)) {}

  std::string name;
  std::variant<TensorView, ScalarValue> value;
};

class Bindings {
 public:
  Bindings() = default;
  Bindings(std::initializer_list<Binding> bindings);  // a repeated name is a UserError

  Bindings& set(Binding binding);  // adds or replaces
  Bindings& buffer(std::string name, TensorView view) { return set({std::move(name), view}); }
  Bindings& param(std::string name, float v) { return set({std::move(name), v}); }
  Bindings& param(std::string name, int32_t v) { return set({std::move(name), v}); }

  const TensorView* find_buffer(std::string_view name) const;
  const ScalarValue* find_param(std::string_view name) const;
  const std::map<std::string, TensorView, std::less<>>& buffers() const { return buffers_; }
  const std::map<std::string, ScalarValue, std::less<>>& params() const { return params_; }

 private:
  std::map<std::string, TensorView, std::less<>> buffers_;
  std::map<std::string, ScalarValue, std::less<>> params_;
};

// Checks `bind` against a program's declarations; every problem is a UserError naming the
// program and the buffer or param: an unbound or unknown name, a buffer bound with the wrong
// dtype or rank or not in `where` memory, a param bound to a tensor (or a buffer to a scalar),
// an i32 param bound to a float, and a named dimension bound to two different sizes.
// Returns each named dimension's bound size.
std::map<std::string, int64_t> check_bindings(std::string_view program,
                                              const std::vector<BufferDecl>& buffers,
                                              const std::vector<ParamDecl>& params,
                                              const Bindings& bind,
                                              TensorView::Where where = TensorView::Where::Device);
inline std::map<std::string, int64_t> check_bindings(
    const AttentionProgram& p, const Bindings& bind,
    TensorView::Where where = TensorView::Where::Device) {
  return check_bindings(p.name, p.buffers, p.params, bind, where);
}

// The TjArgs bytes for `layout` (bindings already checked).
std::vector<unsigned char> pack_args(const ArgLayout& layout, const Bindings& bind);

// The element type a buffer of `elem` is bound with.
DType dtype_of(ElemType elem);

}  // namespace tilejit
