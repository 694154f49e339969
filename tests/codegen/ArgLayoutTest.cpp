#include <gtest/gtest.h>

#include "compiler/codegen/ArgLayout.h"
#include "compiler/codegen/CudaCodegen.h"

namespace tilejit::testing {
namespace {

TEST(ArgLayout, BuffersThenParamsNaturallyAligned) {
  std::vector<BufferDecl> buffers = {{"doc", ElemType::I32, {"B", "S"}},
                                     {"slopes", ElemType::BF16, {"H"}}};
  std::vector<ParamDecl> params = {{"cap", Type::F32}, {"window", Type::I32}, {"s", Type::F32}};
  ArgLayout l = arg_layout(buffers, params);
  ASSERT_EQ(l.fields.size(), 5u);
  EXPECT_EQ(l.fields[0].name, "doc");
  EXPECT_EQ(l.fields[0].offset, 0u);
  EXPECT_EQ(l.fields[0].size, 40u);  // ptr + 2 sizes + 2 strides
  EXPECT_EQ(l.fields[1].offset, 40u);
  EXPECT_EQ(l.fields[1].size, 24u);
  EXPECT_EQ(l.fields[1].elem, ElemType::BF16);
  EXPECT_EQ(l.fields[1].rank, 1);
  EXPECT_EQ(l.fields[2].offset, 64u);
  EXPECT_EQ(l.fields[2].kind, ArgField::Kind::ParamF32);
  EXPECT_EQ(l.fields[3].offset, 68u);
  EXPECT_EQ(l.fields[3].kind, ArgField::Kind::ParamI32);
  EXPECT_EQ(l.fields[4].offset, 72u);
  EXPECT_EQ(l.size, 80u);  // rounded up to 8
  EXPECT_EQ(l.alignment, 8u);
  EXPECT_EQ(l.find("window"), &l.fields[3]);
  EXPECT_EQ(l.find("nope"), nullptr);
  EXPECT_EQ(buffer_size_offset(1), 16u);
  EXPECT_EQ(buffer_stride_offset(2, 0), 24u);
}

TEST(ArgLayout, ParamsOnlyAndEmpty) {
  ArgLayout p = arg_layout({}, {{"a", Type::I32}, {"b", Type::F32}, {"c", Type::I32}});
  EXPECT_EQ(p.fields[2].offset, 8u);
  EXPECT_EQ(p.size, 12u);
  EXPECT_EQ(p.alignment, 4u);
  ArgLayout e = arg_layout({}, {});
  EXPECT_TRUE(e.fields.empty());
  EXPECT_EQ(e.size, 1u);
  EXPECT_EQ(e.alignment, 1u);
}

TEST(ArgLayout, RankZeroBufferIsAPointer) {
  ArgLayout l = arg_layout({{"scalar", ElemType::F32, {}}}, {{"x", Type::F32}});
  EXPECT_EQ(l.fields[0].size, 8u);
  EXPECT_EQ(l.fields[1].offset, 8u);
  EXPECT_EQ(l.size, 16u);
}

// The generated struct checks the same layout on the device side with static_asserts.
TEST(ArgLayout, GeneratedStructAssertsTheLayout) {
  ArgLayout l = arg_layout({{"doc", ElemType::I32, {"B", "S"}}}, {{"cap", Type::F32}});
  std::string s = generate_args_struct(l);
  EXPECT_NE(s.find("TjBuffer<int, 2> doc;"), std::string::npos) << s;
  EXPECT_NE(s.find("static_assert(sizeof(TjArgs) == 48"), std::string::npos) << s;
  EXPECT_NE(s.find("static_assert(alignof(TjArgs) == 8"), std::string::npos) << s;
}

}  // namespace
}  // namespace tilejit::testing
