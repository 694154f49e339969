// Bindings: checked against a program's declarations (each misuse a UserError naming the
// buffer), and packed into TjArgs exactly as ArgLayout says. Host only.
#include <gtest/gtest.h>

#include <cstring>

#include "compiler/Error.h"
#include "runtime/Bindings.h"
#include "runtime/DenseMask.h"

namespace tilejit::testing {
namespace {

AttentionProgram two_buffer_program() {
  AttentionProgram p;
  p.name = "bound";
  p.buffers = {{"doc", ElemType::I32, {"B", "S"}}, {"slopes", ElemType::BF16, {"H"}}};
  p.params = {{"cap", Type::F32}, {"window", Type::I32}};
  return p;
}

// Never dereferenced: checking and packing only look at the view.
void* fake_ptr(uintptr_t v) { return reinterpret_cast<void*>(v); }

TensorView view(std::string name, DType dtype, std::vector<int64_t> shape, uintptr_t ptr) {
  return TensorView::contiguous(fake_ptr(ptr), dtype, std::move(shape), TensorView::Where::Device,
                                std::move(name));
}

Bindings good_bindings() {
  return Bindings{{"doc", view("doc", DType::I32, {2, 100}, 0x1000)},
                  {"slopes", view("slopes", DType::BF16, {8}, 0x2000)},
                  {"cap", 30.0f},
                  {"window", 16}};
}

void expect_user_error(const AttentionProgram& p, const Bindings& b, const std::string& part) {
  try {
    check_bindings(p, b);
    ADD_FAILURE() << "expected a UserError mentioning \"" << part << "\"";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Bindings, GoodBindingsPassAndReportDims) {
  auto dims = check_bindings(two_buffer_program(), good_bindings());
  EXPECT_EQ(dims.at("B"), 2);
  EXPECT_EQ(dims.at("S"), 100);
  EXPECT_EQ(dims.at("H"), 8);
}

TEST(Bindings, Misuse) {
  AttentionProgram p = two_buffer_program();
  Bindings b = good_bindings();
  Bindings unbound = b;
  unbound = Bindings{
      {"slopes", view("slopes", DType::BF16, {8}, 0x2000)}, {"cap", 30.0f}, {"window", 16}};
  expect_user_error(p, unbound, "buffer 'doc'");
  expect_user_error(p, Bindings(b).buffer("doc", view("doc", DType::F32, {2, 100}, 0x1000)),
                    "'doc' is declared i32[B, S] but bound to a f32");
  expect_user_error(p, Bindings(b).buffer("doc", view("doc", DType::I32, {200}, 0x1000)), "rank");
  expect_user_error(p,
                    Bindings(b)
                        .buffer("doc", view("doc", DType::I32, {2, 100}, 0x1000))
                        .buffer("slopes", view("slopes", DType::BF16, {8, 1}, 0x2000)),
                    "'slopes'");
  expect_user_error(p, Bindings(b).param("extra", 1.0f), "'extra'");
  expect_user_error(p, Bindings(b).param("window", 2.5f), "param 'window' is i32");
  expect_user_error(p, Bindings(b).param("doc", 1), "buffer 'doc' is bound to a scalar");
  TensorView host = view("doc", DType::I32, {2, 100}, 0x1000);
  host.where = TensorView::Where::Host;
  expect_user_error(p, Bindings(b).buffer("doc", host), "device");
  EXPECT_THROW((Bindings{{"cap", 1.0f}, {"cap", 2.0f}}), UserError);
}

TEST(Bindings, DimensionBoundToTwoSizes) {
  AttentionProgram p;
  p.name = "dims";
  p.buffers = {{"doc", ElemType::I32, {"B", "S"}}, {"pos", ElemType::I32, {"B", "S"}}};
  Bindings b{{"doc", view("doc", DType::I32, {2, 100}, 0x1000)},
             {"pos", view("pos", DType::I32, {2, 99}, 0x2000)}};
  expect_user_error(p, b, "dimension 'S' is 100 in buffer 'doc' but 99 in buffer 'pos'");
}

TEST(Bindings, PackFollowsTheLayout) {
  AttentionProgram p = two_buffer_program();
  Bindings b = good_bindings();
  TensorView doc = view("doc", DType::I32, {2, 100}, 0x1000);
  doc.strides = {128, 1};
  b.buffer("doc", doc);
  ArgLayout layout = arg_layout(p);
  std::vector<unsigned char> bytes = pack_args(layout, b);
  ASSERT_EQ(bytes.size(), layout.size);
  auto at = [&](size_t offset, auto v) {
    std::memcpy(&v, bytes.data() + offset, sizeof v);
    return v;
  };
  EXPECT_EQ(at(0, uintptr_t{}), 0x1000u);
  EXPECT_EQ(at(8, int64_t{}), 2);
  EXPECT_EQ(at(16, int64_t{}), 100);
  EXPECT_EQ(at(24, int64_t{}), 128);
  EXPECT_EQ(at(32, int64_t{}), 1);
  EXPECT_EQ(at(40, uintptr_t{}), 0x2000u);
  EXPECT_EQ(at(48, int64_t{}), 8);
  EXPECT_EQ(at(56, int64_t{}), 1);
  EXPECT_EQ(at(layout.find("cap")->offset, float{}), 30.0f);
  EXPECT_EQ(at(layout.find("window")->offset, int32_t{}), 16);
  // An f32 param takes an int too.
  b.param("cap", 3);
  EXPECT_EQ(at(layout.find("cap")->offset, float{}), 30.0f);  // old bytes unchanged
  bytes = pack_args(layout, b);
  EXPECT_EQ(at(layout.find("cap")->offset, float{}), 3.0f);
}

}  // namespace
}  // namespace tilejit::testing
