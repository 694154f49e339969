#include <gtest/gtest.h>

#include "compiler/Error.h"
#include "runtime/TensorView.h"

namespace tilejit {
namespace {

using Where = TensorView::Where;

// The message of the UserError `f` throws ("" when it throws nothing).
template <typename F>
std::string user_error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TensorView q_view() {
  alignas(16) static char storage[16];
  return TensorView::contiguous(storage, DType::BF16, {2, 8, 128, 64}, Where::Device, "q");
}

TEST(TensorView, ContiguousStridesAndSizes) {
  TensorView q = q_view();
  EXPECT_EQ(q.strides, (std::vector<int64_t>{65536, 8192, 64, 1}));
  EXPECT_EQ(q.numel(), 2 * 8 * 128 * 64);
  EXPECT_EQ(q.span_bytes(), size_t(2 * 8 * 128 * 64 * 2));
  EXPECT_TRUE(q.is_contiguous());
  EXPECT_EQ(q.dim(-1), 64);
  EXPECT_EQ(q.stride(0), 65536);
  EXPECT_EQ(q.describe(), "q: bf16[2, 8, 128, 64] strides [65536, 8192, 64, 1] device");
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::Bool), 1u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  EXPECT_EQ(dtype_name(DType::I64), "i64");
  EXPECT_EQ(TensorView::contiguous_strides({}), std::vector<int64_t>{});
}

TEST(TensorView, TransposedViewIsNotContiguous) {
  TensorView k = q_view();
  k.name = "k";
  std::swap(k.shape[1], k.shape[2]);  // [B, S, H, D] viewed as [B, H, S, D]
  std::swap(k.strides[1], k.strides[2]);
  EXPECT_FALSE(k.is_contiguous());
  EXPECT_NO_THROW(k.check_last_dim_contiguous().check_strides_positive());
}

TEST(TensorView, ValidatorsPassOnAGoodTensor) {
  EXPECT_NO_THROW(q_view()
                      .check_well_formed()
                      .check_rank(4)
                      .check_dim(3, 64, "head_dim")
                      .check_dtype({DType::BF16, DType::F16})
                      .check_strides_positive()
                      .check_alignment(16)
                      .check_where(Where::Device)
                      .check_last_dim_contiguous());
}

TEST(TensorView, MessagesNameTheTensorAndTheProblem) {
  TensorView q = q_view();
  std::string m = user_error_of([&] { q.check_rank(3); });
  EXPECT_NE(m.find("'q'"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 3, got rank 4"), std::string::npos) << m;

  m = user_error_of([&] { q.check_dim(2, 256, "seq_q"); });
  EXPECT_NE(m.find("'q'"), std::string::npos) << m;
  EXPECT_NE(m.find("dimension 2 (seq_q) must be 256, got 128"), std::string::npos) << m;

  m = user_error_of([&] { q.check_dtype(DType::F32); });
  EXPECT_NE(m.find("tensor 'q' must have dtype f32, got bf16"), std::string::npos) << m;
  m = user_error_of([&] { q.check_dtype({DType::F32, DType::F16}); });
  EXPECT_NE(m.find("f32 or f16"), std::string::npos) << m;

  m = user_error_of([&] { q.check_where(Where::Host); });
  EXPECT_NE(m.find("tensor 'q' must be in host memory, got device memory"), std::string::npos) << m;

  TensorView odd = q;
  odd.data = static_cast<char*>(q.data) + 2;
  m = user_error_of([&] { odd.check_alignment(16); });
  EXPECT_NE(m.find("'q'"), std::string::npos) << m;
  EXPECT_NE(m.find("aligned to 16 bytes"), std::string::npos) << m;

  TensorView negative = q;
  negative.strides[1] = -8192;
  m = user_error_of([&] { negative.check_strides_positive(); });
  EXPECT_NE(m.find("stride of dimension 1 must be positive, got -8192"), std::string::npos) << m;

  TensorView strided = q;
  strided.strides[3] = 2;
  m = user_error_of([&] { strided.check_last_dim_contiguous(); });
  EXPECT_NE(m.find("'q'"), std::string::npos) << m;
  EXPECT_NE(m.find("last dimension must be contiguous"), std::string::npos) << m;

  TensorView broken = q;
  broken.strides.pop_back();
  m = user_error_of([&] { broken.check_well_formed(); });
  EXPECT_NE(m.find("4 dimensions but 3 strides"), std::string::npos) << m;

  TensorView empty_ptr = q;
  empty_ptr.data = nullptr;
  m = user_error_of([&] { empty_ptr.check_well_formed(); });
  EXPECT_NE(m.find("no data pointer"), std::string::npos) << m;

  m = user_error_of([&] { q.dim(4); });
  EXPECT_NE(m.find("axis 4 out of range"), std::string::npos) << m;
}

}  // namespace
}  // namespace tilejit
