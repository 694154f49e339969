// A benchmark's tensor on the device: its buffer and a contiguous view of it, filled from host
// memory when given (the GPU benches' inputs and outputs).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/TensorView.h"

namespace tilejit::bench {

struct DeviceTensor {
  DeviceBuffer buffer;
  TensorView view;
};

// A contiguous tensor of `shape`, filled from `host` when given.
inline DeviceTensor device_tensor(DType dtype, std::vector<int64_t> shape, std::string name,
                                  const void* host = nullptr) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  DeviceTensor t{DeviceBuffer(std::max<int64_t>(1, n) * dtype_size(dtype)), {}};
  if (host) t.buffer.copy_from_host(host, n * dtype_size(dtype));
  t.view = TensorView::contiguous(t.buffer.data(), dtype, std::move(shape),
                                  TensorView::Where::Device, std::move(name));
  return t;
}

}  // namespace tilejit::bench
