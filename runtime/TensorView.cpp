#include "runtime/TensorView.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "compiler/Error.h"

namespace tilejit {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::U8: return 1;
    case DType::Bool: return 1;
    case DType::I64: return 8;
  }
  internal_error("unknown DType {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
    case DType::Bool: return "bool";
    case DType::I64: return "i64";
  }
  internal_error("unknown DType {}", static_cast<int>(dtype));
}

namespace {
std::string_view where_name(TensorView::Where where) {
  return where == TensorView::Where::Host ? "host" : "device";
}
std::string label(const TensorView& t) {
  return t.name.empty() ? std::string("tensor (unnamed)") : fmt::format("tensor '{}'", t.name);
}
}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype, std::vector<int64_t> shape, Where where,
                                  std::string name) {
  TensorView view{data, dtype, std::move(shape), {}, where, std::move(name)};
  view.strides = contiguous_strides(view.shape);
  return view;
}

std::vector<int64_t> TensorView::contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    step *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

static int normalize_axis(const TensorView& t, int axis) {
  int a = axis < 0 ? axis + t.rank() : axis;
  TILEJIT_USER_CHECK(a >= 0 && a < t.rank(), "{}: axis {} out of range for rank {}", label(t), axis,
                     t.rank());
  return a;
}

int64_t TensorView::dim(int axis) const { return shape[normalize_axis(*this, axis)]; }
int64_t TensorView::stride(int axis) const { return strides[normalize_axis(*this, axis)]; }

bool TensorView::is_contiguous() const { return strides == contiguous_strides(shape); }

size_t TensorView::span_bytes() const {
  if (numel() == 0) return 0;
  int64_t last = 0;
  for (size_t i = 0; i < shape.size(); ++i) last += (shape[i] - 1) * std::abs(strides[i]);
  return static_cast<size_t>(last + 1) * dtype_size(dtype);
}

std::string TensorView::describe() const {
  return fmt::format("{}: {}[{}] strides [{}] {}", name.empty() ? "(unnamed)" : name,
                     dtype_name(dtype), fmt::join(shape, ", "), fmt::join(strides, ", "),
                     where_name(where));
}

const TensorView& TensorView::check_rank(int expected) const {
  TILEJIT_USER_CHECK(rank() == expected, "{} must have rank {}, got rank {} ({})", label(*this),
                     expected, rank(), describe());
  return *this;
}

const TensorView& TensorView::check_dim(int axis, int64_t expected,
                                        std::string_view dim_name) const {
  int a = normalize_axis(*this, axis);
  if (shape[a] == expected) return *this;
  std::string which = dim_name.empty() ? fmt::format("dimension {}", a)
                                       : fmt::format("dimension {} ({})", a, dim_name);
  user_error("{}: {} must be {}, got {} ({})", label(*this), which, expected, shape[a], describe());
}

const TensorView& TensorView::check_dtype(DType expected) const {
  TILEJIT_USER_CHECK(dtype == expected, "{} must have dtype {}, got {}", label(*this),
                     dtype_name(expected), dtype_name(dtype));
  return *this;
}

const TensorView& TensorView::check_dtype(std::initializer_list<DType> allowed) const {
  if (std::find(allowed.begin(), allowed.end(), dtype) != allowed.end()) return *this;
  std::vector<std::string_view> names;
  for (DType d : allowed) names.push_back(dtype_name(d));
  user_error("{} must have dtype {}, got {}", label(*this), fmt::join(names, " or "),
             dtype_name(dtype));
}

const TensorView& TensorView::check_strides_positive() const {
  for (int i = 0; i < rank(); ++i) {
    TILEJIT_USER_CHECK(strides[i] > 0, "{}: stride of dimension {} must be positive, got {} ({})",
                       label(*this), i, strides[i], describe());
  }
  return *this;
}

const TensorView& TensorView::check_alignment(size_t bytes) const {
  auto address = reinterpret_cast<uintptr_t>(data);
  TILEJIT_USER_CHECK(bytes == 0 || address % bytes == 0,
                     "{}: data pointer {} must be aligned to {} bytes", label(*this), data, bytes);
  return *this;
}

const TensorView& TensorView::check_where(Where expected) const {
  TILEJIT_USER_CHECK(where == expected, "{} must be in {} memory, got {} memory", label(*this),
                     where_name(expected), where_name(where));
  return *this;
}

const TensorView& TensorView::check_last_dim_contiguous() const {
  TILEJIT_USER_CHECK(rank() > 0 && (strides.back() == 1 || shape.back() == 1),
                     "{}: the last dimension must be contiguous (stride 1), got stride {} ({})",
                     label(*this), rank() > 0 ? strides.back() : 0, describe());
  return *this;
}

const TensorView& TensorView::check_well_formed() const {
  TILEJIT_USER_CHECK(strides.size() == shape.size(), "{} has {} dimensions but {} strides",
                     label(*this), shape.size(), strides.size());
  for (int i = 0; i < rank(); ++i) {
    TILEJIT_USER_CHECK(shape[i] >= 0, "{}: dimension {} is negative ({})", label(*this), i,
                       shape[i]);
  }
  TILEJIT_USER_CHECK(data != nullptr || numel() == 0, "{} has {} elements but no data pointer",
                     label(*this), numel());
  return *this;
}

}  // namespace tilejit
