// TensorView: a non-owning view of a strided tensor handed to tilejit (a device pointer from the
// host application, or host memory for the CPU executors), with validators whose errors name the
// tensor and say exactly what is wrong.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace tilejit {

enum class DType { F32, F16, BF16, I32, U8, Bool, I64 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "f16", "bf16", "i32", "u8", "bool", "i64"

struct TensorView {
  enum class Where { Host, Device };

  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  Where where = Where::Device;
  std::string name;  // used in error messages: "q", "doc"

  // A view with contiguous (row-major) strides.
  static TensorView contiguous(void* data, DType dtype, std::vector<int64_t> shape, Where where,
                               std::string name);
  static std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  int64_t dim(int axis) const;  // negative axes count from the end
  int64_t stride(int axis) const;
  bool is_contiguous() const;
  // Bytes from the first to one past the last element reachable by the strides.
  size_t span_bytes() const;
  CUdeviceptr device_ptr() const { return reinterpret_cast<CUdeviceptr>(data); }
  std::string describe() const;  // "q: bf16[2, 8, 128, 64] strides [65536, 8192, 64, 1] device"

  // Validators: each throws UserError naming the tensor; each returns *this for chaining.
  const TensorView& check_rank(int expected) const;
  // `dim_name` says which dimension ("seq_kv"); the message shows the expected and actual size.
  const TensorView& check_dim(int axis, int64_t expected, std::string_view dim_name = {}) const;
  const TensorView& check_dtype(DType expected) const;
  const TensorView& check_dtype(std::initializer_list<DType> allowed) const;
  const TensorView& check_strides_positive() const;
  const TensorView& check_alignment(size_t bytes) const;  // of the data pointer
  const TensorView& check_where(Where expected) const;
  const TensorView& check_last_dim_contiguous() const;
  // Shape and strides have the same rank, dims are non-negative and data is set when numel > 0.
  const TensorView& check_well_formed() const;
};

}  // namespace tilejit
