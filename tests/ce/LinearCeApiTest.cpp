// Misuse of the linear cross-entropy API (runtime/LinearCe.h): every bad tensor, binding, option
// or program is a UserError that names what is wrong, raised before anything is launched. The
// views point at fake device addresses: the checks run before any GPU is needed, so these tests
// run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <tuple>

#include "compiler/Error.h"
#include "dsl/TextForm.h"
#include "runtime/LinearCe.h"
#include "runtime/LinearCeTma.h"

namespace tilejit::testing {
namespace {

constexpr int64_t kN = 64, kD = 128;

void* fake(uintptr_t slot) { return reinterpret_cast<void*>(uintptr_t{1} << 40 | slot << 20); }

TensorView device(DType dtype, std::vector<int64_t> shape, std::string name, uintptr_t slot) {
  return TensorView::contiguous(fake(slot), dtype, std::move(shape), TensorView::Where::Device,
                                std::move(name));
}

LossProgram parse_loss(const std::string& text) {
  return std::get<LossProgram>(parse_program(text, "test.tj"));
}

const char* const kTwoSegments = R"(
loss two {
  segment base : [0, 1000) weight W_base
  segment extra : [1100, 1300) weight W_extra bias b_extra
})";

const char* const kSoftcap = R"(
loss capped {
  param cap : f32
  segment vocab : [0, 512) weight W
  logit = cap * tanh(logit / cap)
})";

// A well-formed call on the two-segment program; each test breaks one thing.
struct Call {
  LossProgram prog = parse_loss(kTwoSegments);
  TensorView E = device(DType::BF16, {kN, kD}, "E", 1);
  TensorView targets = device(DType::I32, {kN}, "targets", 2);
  Bindings bind{{"W_base", device(DType::BF16, {1000, kD}, "w0", 3)},
                {"W_extra", device(DType::BF16, {200, kD}, "w1", 4)},
                {"b_extra", device(DType::BF16, {200}, "b1", 5)}};
  LinearCeOptions options;
  LinearCeOutputs outputs;
  LinearCeTeacher teacher;

  void run() const {
    linear_cross_entropy_forward(prog, E, bind, targets, options, nullptr, outputs, teacher);
  }
};

// The call raises a UserError whose message contains `needle`.
void expect_user_error(const Call& call, const std::string& needle) {
  try {
    call.run();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected it to name: " << needle;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UserError: " << e.what();
  }
}

using Breaker = std::function<void(Call&)>;

struct Misuse {
  const char* what;
  Breaker breaker;
  const char* needle;
};

const Misuse kMisuses[] = {
    {"E of rank 3",
     [](Call& c) {
       c.E = device(DType::BF16, {2, kN / 2, kD}, "E", 1);
     },
     "'E'"},
    {"E in f32", [](Call& c) { c.E.dtype = DType::F32; }, "'E'"},
    {"D not a multiple of 8",
     [](Call& c) {
       c.E = device(DType::BF16, {kN, 100}, "E", 1);
     },
     "'E'"},
    {"E transposed",
     [](Call& c) {
       c.E.strides = {1, kN};
     },
     "'E'"},
    {"E on the host", [](Call& c) { c.E.where = TensorView::Where::Host; }, "'E'"},
    {"E misaligned", [](Call& c) { c.E.data = static_cast<char*>(c.E.data) + 2; }, "'E'"},
    {"E with an odd row stride",
     [](Call& c) {
       c.E.strides = {kD + 4, 1};
     },
     "'E'"},
    {"targets too long", [](Call& c) { c.targets = device(DType::I32, {kN + 1}, "targets", 2); },
     "'targets'"},
    {"targets in f32", [](Call& c) { c.targets.dtype = DType::F32; }, "'targets'"},
    {"targets of rank 2",
     [](Call& c) {
       c.targets = device(DType::I32, {kN, 1}, "targets", 2);
     },
     "'targets'"},
    {"W_base not bound",
     [](Call& c) {
       Bindings b;
       b.buffer("W_extra", *c.bind.find_buffer("W_extra"));
       b.buffer("b_extra", *c.bind.find_buffer("b_extra"));
       c.bind = b;
     },
     "W_base"},
    {"W_base with the wrong D",
     [](Call& c) {
       c.bind.buffer("W_base", device(DType::BF16, {1000, kD + 8}, "w0", 3));
     },
     "W_base"},
    {"W_base with the wrong vocabulary size",
     [](Call& c) {
       c.bind.buffer("W_base", device(DType::BF16, {999, kD}, "w0", 3));
     },
     "W_base"},
    {"W_extra in f16 while E is bf16",
     [](Call& c) {
       c.bind.buffer("W_extra", device(DType::F16, {200, kD}, "w1", 4));
     },
     "W_extra"},
    {"W_extra rows not 16-byte aligned",
     [](Call& c) {
       TensorView w = device(DType::BF16, {200, kD}, "w1", 4);
       w.strides = {kD + 2, 1};
       c.bind.buffer("W_extra", w);
     },
     "W_extra"},
    {"W_base bound to a scalar", [](Call& c) { c.bind.param("W_base", 1.0f); }, "W_base"},
    {"bias b_extra of the wrong size",
     [](Call& c) { c.bind.buffer("b_extra", device(DType::BF16, {201}, "b1", 5)); }, "b_extra"},
    {"an unknown binding",
     [](Call& c) {
       c.bind.buffer("W_typo", device(DType::BF16, {10, kD}, "wt", 6));
     },
     "W_typo"},
    {"loss output in f16", [](Call& c) { c.outputs.loss = device(DType::F16, {1}, "loss_out", 7); },
     "loss_out"},
    {"lse output of the wrong length",
     [](Call& c) { c.outputs.lse = device(DType::F32, {kN - 1}, "lse_out", 8); }, "lse_out"},
    {"row_loss output strided",
     [](Call& c) {
       TensorView t = device(DType::F32, {kN}, "row_loss_out", 9);
       t.strides = {2};
       c.outputs.row_loss = t;
     },
     "row_loss_out"},
    {"filter threshold NaN", [](Call& c) { c.options.filter_threshold = std::nanf(""); },
     "filter_threshold"},
    {"filter threshold 1", [](Call& c) { c.options.filter_threshold = 1.f; }, "filter_threshold"},
    {"a KL term without the teacher's hidden states",
     [](Call& c) {
       c.prog = parse_loss(R"(
loss distill {
  segment vocab : [0, 1000) weight W_base
  kl alpha = 0.5 temperature = 2
  teacher segment vocab : [0, 1000) weight W_teacher
})");
     },
     "teacher's hidden states"},
    {"a teacher layout cut elsewhere than the student's",
     [](Call& c) {
       c.prog = parse_loss(R"(
loss distill {
  segment vocab : [0, 1000) weight W_base
  kl alpha = 0.5 temperature = 2
  teacher segment lo : [0, 500) weight T_lo
  teacher segment hi : [500, 1000) weight T_hi
})");
       c.teacher.hidden = device(DType::BF16, {kN, kD}, "E_teacher", 10);
     },
     "must start and end where the student's do"},
    {"teacher hidden states of another width than the shared weights",
     [](Call& c) {
       c.prog = parse_loss(R"(
loss distill {
  segment vocab : [0, 1000) weight W_base
  kl alpha = 0.5 temperature = 2
})");
       c.bind = Bindings{{"W_base", device(DType::BF16, {1000, kD}, "w0", 3)}};
       c.teacher.hidden = device(DType::BF16, {kN, kD / 2}, "E_teacher", 10);
     },
     "E_teacher"},
    {"teacher weight not bound",
     [](Call& c) {
       c.prog = parse_loss(R"(
loss distill {
  segment vocab : [0, 1000) weight W_base
  kl alpha = 0.5 temperature = 2
  teacher segment vocab : [0, 1000) weight W_teacher
})");
       c.bind = Bindings{{"W_base", device(DType::BF16, {1000, kD}, "w0", 3)}};
       c.teacher.hidden = device(DType::BF16, {kN, kD}, "E_teacher", 10);
     },
     "W_teacher"},
    {"teacher weight of the wrong width",
     [](Call& c) {
       c.prog = parse_loss(R"(
loss distill {
  segment vocab : [0, 1000) weight W_base
  kl alpha = 0.5 temperature = 2
  teacher segment vocab : [0, 1000) weight W_teacher
})");
       c.bind = Bindings{{"W_base", device(DType::BF16, {1000, kD}, "w0", 3)},
                         {"W_teacher", device(DType::BF16, {1000, 2 * kD}, "wt", 12)}};
       c.teacher.hidden = device(DType::BF16, {kN, kD}, "E_teacher", 10);
     },
     "W_teacher"},
    {"teacher without a KL term",
     [](Call& c) { c.teacher.hidden = device(DType::BF16, {kN, kD}, "E_teacher", 10); },
     "has no kl term"},
    {"i64 targets of the wrong length",
     [](Call& c) { c.targets = device(DType::I64, {kN + 1}, "targets64", 11); }, "targets64"},
    {"five segments",
     [](Call& c) {
       c.prog = parse_loss(R"(
loss many {
  segment a : [0, 10) weight A
  segment b : [10, 20) weight B
  segment c : [20, 30) weight C
  segment d : [30, 40) weight D
  segment e : [40, 50) weight F
})");
     },
     "at most 4"},
};

class LinearCeMisuse : public ::testing::TestWithParam<Misuse> {};

TEST_P(LinearCeMisuse, IsAUserErrorNamingTheCulprit) {
  Call call;
  GetParam().breaker(call);
  expect_user_error(call, GetParam().needle);
}

INSTANTIATE_TEST_SUITE_P(All, LinearCeMisuse, ::testing::ValuesIn(kMisuses),
                         [](const ::testing::TestParamInfo<Misuse>& info) {
                           std::string n = info.param.what;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// The Hopper forward's tensor maps, as cuTensorMapEncodeTiled receives them: 2-D (dim, rows), boxes
// of 64 columns by the forward's row tile (compacted rows, row stride dim) or a vocabulary tile
// (a segment's weights, their own row stride).
TEST(LinearCeApi, TensorMapsDescribeTheCompactedRowsAndTheWeights) {
  for (auto [rows, dim, f16] : {std::tuple<int64_t, int64_t, bool>{8192, 2304, false},
                                {1, 8, true},
                                {0, 4096, false},
                                {300, 5120, true}}) {
    const TiledTensorMapArgs a =
        ce_hidden_tensor_map_args(reinterpret_cast<void*>(0x4000), rows, dim, f16);
    EXPECT_EQ(a.rank, 2u);
    EXPECT_EQ(a.type, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    EXPECT_EQ(a.address, reinterpret_cast<void*>(0x4000));
    EXPECT_EQ(a.dims[0], cuuint64_t(dim));
    EXPECT_EQ(a.dims[1], cuuint64_t(rows > 0 ? rows : 1));
    EXPECT_EQ(a.strides[0], cuuint64_t(dim * 2));
    EXPECT_EQ(a.strides[0] % 16, 0u);
    EXPECT_EQ(a.box[0] * 2, 128u);  // one 128-byte swizzle span
    EXPECT_EQ(a.box[1], 256u);      // the forward's row tile
    EXPECT_EQ(a.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
    // A segment's weights with a padded row stride: the vocabulary tile's 128 rows per box.
    const TiledTensorMapArgs w =
        ce_weight_tensor_map_args(reinterpret_cast<void*>(0x8000), rows, dim, dim + 64, f16);
    EXPECT_EQ(w.dims[0], cuuint64_t(dim));
    EXPECT_EQ(w.dims[1], cuuint64_t(rows > 0 ? rows : 1));
    EXPECT_EQ(w.strides[0], cuuint64_t((dim + 64) * 2));
    EXPECT_EQ(w.box[0], 64u);
    EXPECT_EQ(w.box[1], 128u);
  }
}

TEST(LinearCeApi, CapturedParamsAreChecked) {
  Call call;
  call.prog = parse_loss(kSoftcap);
  call.bind = Bindings{{"W", device(DType::BF16, {512, kD}, "w", 3)}};
  expect_user_error(call, "'cap'");
  call.bind.param("cap", int32_t{30});  // an f32 param takes an int: accepted by the checks
  call.bind.buffer("cap_typo", device(DType::F32, {1}, "x", 4));
  expect_user_error(call, "cap_typo");
}

TEST(LinearCeApi, SegmentNamesResolveToTheirTensors) {
  Call call;
  std::vector<SegmentBinding> segs = bind_segments(call.prog, call.E, call.bind);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].weight.name, "W_base");
  EXPECT_FALSE(segs[0].bias.has_value());
  EXPECT_EQ(segs[1].weight.shape, (std::vector<int64_t>{200, kD}));
  ASSERT_TRUE(segs[1].bias.has_value());
  EXPECT_EQ(segs[1].bias->name, "b_extra");
}

TEST(LinearCeApi, ValidCallNeedsOnlyAGpu) {
  // Everything checked passes; without a GPU the call stops at the driver, with a UserError
  // that says so. (With one, the fake addresses are refused as not device memory.)
  Call call;
  try {
    call.run();
    ADD_FAILURE() << "fake device addresses were accepted";
  } catch (const UserError& e) {
    std::string m = e.what();
    EXPECT_TRUE(m.find("no GPU") != std::string::npos ||
                m.find("not device memory") != std::string::npos)
        << m;
  }
}

}  // namespace
}  // namespace tilejit::testing
