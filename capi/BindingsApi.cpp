// The C ABI's bindings: named buffers (tensor views) and f32 / i32 params. Checked against a
// program when a call uses them, as the runtime's Bindings are.
#include <memory>
#include <string>

#include "ErrorBoundary.h"
#include "Handles.h"
#include "TensorDesc.h"

using namespace tilejit;
using namespace tilejit::capi;

namespace {

tj_bindings& handle(tj_bindings* bindings) {
  if (!bindings) fail(TJ_ERR_INVALID_ARGUMENT, "the bindings are NULL");
  return *bindings;
}

std::string binding_name(const char* name) {
  if (!name) fail(TJ_ERR_INVALID_ARGUMENT, "the binding name is NULL");
  if (!*name) fail(TJ_ERR_INVALID_ARGUMENT, "the binding name is empty");
  return name;
}

template <class T>
tj_status set_param(const char* function, tj_bindings* bindings, const char* name, T value) {
  return boundary(function, [&] {
    tj_bindings& b = handle(bindings);
    std::string n = binding_name(name);
    b.values.param(n, value);
    b.device_of.erase(n);
  });
}

}  // namespace

extern "C" {

tj_status tj_bindings_create(tj_bindings** out) {
  if (out) *out = nullptr;
  return boundary("tj_bindings_create", [&] {
    tj_bindings*& result = out_param(out, "out");
    result = std::make_unique<tj_bindings>().release();
  });
}

void tj_bindings_destroy(tj_bindings* bindings) { delete bindings; }

tj_status tj_bindings_set_buffer(tj_bindings* bindings, const char* name, const tj_tensor* tensor) {
  return boundary("tj_bindings_set_buffer", [&] {
    tj_bindings& b = handle(bindings);
    std::string n = binding_name(name);
    TensorView view = to_view(tensor, n);
    b.values.buffer(n, std::move(view));
    if (tensor->device >= 0)
      b.device_of[n] = tensor->device;
    else
      b.device_of.erase(n);
  });
}

tj_status tj_bindings_set_f32(tj_bindings* bindings, const char* name, float value) {
  return set_param("tj_bindings_set_f32", bindings, name, value);
}

tj_status tj_bindings_set_i32(tj_bindings* bindings, const char* name, int32_t value) {
  return set_param("tj_bindings_set_i32", bindings, name, value);
}

}  // extern "C"
