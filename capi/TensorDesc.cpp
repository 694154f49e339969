#include "TensorDesc.h"

#include <limits>

#include "ErrorBoundary.h"
#include "runtime/Driver.h"

namespace tilejit::capi {

namespace {

DType dtype_of_code(int32_t code, const std::string& name) {
  switch (code) {
    case TJ_DTYPE_F32: return DType::F32;
    case TJ_DTYPE_F16: return DType::F16;
    case TJ_DTYPE_BF16: return DType::BF16;
    case TJ_DTYPE_I32: return DType::I32;
    case TJ_DTYPE_U8: return DType::U8;
    case TJ_DTYPE_BOOL: return DType::Bool;
    case TJ_DTYPE_I64: return DType::I64;
  }
  fail(TJ_ERR_INVALID_ARGUMENT,
       "tensor '{}' has dtype code {}, which is not a tj_dtype (TJ_DTYPE_F32 = 0 .. TJ_DTYPE_BOOL "
       "= 6)",
       name, code);
}

}  // namespace

const tj_tensor& required(const tj_tensor* t, const char* name) {
  if (!t) fail(TJ_ERR_INVALID_ARGUMENT, "tensor '{}' is NULL", name);
  return *t;
}

TensorView to_view(const tj_tensor* t, std::string name) {
  const tj_tensor& d = required(t, name.c_str());
  const DType dtype = dtype_of_code(d.dtype, name);
  if (d.ndim < 0 || d.ndim > TJ_MAX_NDIM)
    fail(TJ_ERR_INVALID_ARGUMENT, "tensor '{}' has ndim {}, outside [0, {}]", name, d.ndim,
         TJ_MAX_NDIM);
  if (d.ndim > 0 && !d.shape)
    fail(TJ_ERR_INVALID_ARGUMENT, "tensor '{}' has ndim {} but a NULL shape", name, d.ndim);
  if (d.device < TJ_HOST)
    fail(TJ_ERR_INVALID_ARGUMENT,
         "tensor '{}' has device {}: expected TJ_HOST (-1) or a CUDA device ordinal", name,
         d.device);
  TensorView v;
  v.data = d.data;
  v.dtype = dtype;
  v.shape.assign(d.shape, d.shape + d.ndim);
  // numel() multiplies the dimensions: keep the product representable.
  int64_t elements = 1;
  for (int64_t n : v.shape) {
    if (n < 0) break;  // check_well_formed names it below
    if (n > 0 && elements > std::numeric_limits<int64_t>::max() / n)
      fail(TJ_ERR_INVALID_ARGUMENT, "tensor '{}' has more than 2^63 elements", name);
    elements *= n;
  }
  v.strides = d.strides ? std::vector<int64_t>(d.strides, d.strides + d.ndim)
                        : TensorView::contiguous_strides(v.shape);
  v.where = d.device == TJ_HOST ? TensorView::Where::Host : TensorView::Where::Device;
  v.name = std::move(name);
  v.check_well_formed();
  return v;
}

void prepare_device(int ordinal, const std::string& what) {
  Driver* driver = Driver::get();
  if (!driver)
    fail(TJ_ERR_NO_DEVICE, "{} is in device memory (device {}) but no GPU is usable: {}", what,
         ordinal, Driver::unavailable_reason());
  const int count = driver->device_count();
  if (ordinal >= count)
    fail(TJ_ERR_INVALID_ARGUMENT, "{} is on device {} but this machine has {} device(s)", what,
         ordinal, count);
  if (!driver->current_context()) driver->use_device(ordinal);
}

void prepare_placement(int device, const std::string& what,
                       const std::vector<NamedTensor>& others) {
  if (device < 0) return;
  for (const auto& [name, t] : others)
    if (t && t->device >= 0 && t->device != device)
      fail(TJ_ERR_INVALID_ARGUMENT, "tensor '{}' is on device {} but {} is on device {}", name,
           t->device, what, device);
  prepare_device(device, what);
}

void prepare_placement(const NamedTensor& primary, const std::vector<NamedTensor>& others) {
  if (!primary.second) return;
  prepare_placement(primary.second->device, fmt::format("tensor '{}'", primary.first), others);
}

}  // namespace tilejit::capi
