// dense_mask on the GPU against the interpreter (compiler/Interpreter.h), element for element,
// on random shapes, strided buffers and outputs poisoned before each run. Skips without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "compiler/Interpreter.h"
#include "compiler/Printer.h"
#include "dsl/Stdlib.h"
#include "runtime/DenseMask.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "tests/codegen/CodegenTestPrograms.h"
#include "tests/support/RandomProgram.h"

namespace tilejit::testing {
namespace {

constexpr unsigned char kPoison = 0xAB;

// f16 bits of a value exactly representable as a normal f16 (or zero).
uint16_t f16_bits(float v) {
  if (v == 0) return 0;
  uint32_t u;
  std::memcpy(&u, &v, 4);
  uint32_t sign = (u >> 16) & 0x8000u, exp = (u >> 23) & 0xFF, mant = u & 0x7FFFFF;
  return static_cast<uint16_t>(sign | ((exp - 127 + 15) << 10) | (mant >> 13));
}

// A captured buffer filled with small random values, with padded (non-contiguous) strides.
struct HostBuffer {
  std::vector<unsigned char> bytes;
  BufferView view;
  DeviceBuffer device;
  TensorView tensor;
};

HostBuffer make_buffer(std::mt19937_64& rng, const BufferDecl& decl,
                       const std::map<std::string, int64_t>& dims) {
  HostBuffer out;
  std::vector<int64_t> shape, strides(decl.dims.size());
  for (const std::string& d : decl.dims) shape.push_back(dims.at(d));
  int64_t extent = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = extent;
    extent *= shape[i] + static_cast<int64_t>(rng() % 3);  // padding between rows
  }
  const size_t esize = elem_size(decl.elem);
  out.bytes.assign(static_cast<size_t>(extent) * esize, 0);
  std::uniform_int_distribution<int> small(-3, 8), halves(-8, 8);
  for (int64_t i = 0; i < extent; ++i) {
    unsigned char* at = out.bytes.data() + i * esize;
    float f = halves(rng) * 0.5f;
    if (decl.elem == ElemType::I32) {
      int32_t v = small(rng);
      std::memcpy(at, &v, 4);
    } else if (decl.elem == ElemType::F32) {
      std::memcpy(at, &f, 4);
    } else if (decl.elem == ElemType::BF16) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      uint16_t bits = static_cast<uint16_t>(u >> 16);
      std::memcpy(at, &bits, 2);
    } else {
      uint16_t bits = f16_bits(f);
      std::memcpy(at, &bits, 2);
    }
  }
  out.view = {out.bytes.data(), decl.elem, shape, strides};
  out.device = DeviceBuffer(out.bytes.size());
  out.device.copy_from_host(out.bytes.data(), out.bytes.size());
  out.tensor = {out.device.data(), dtype_of(decl.elem),       shape,
                strides,           TensorView::Where::Device, decl.name};
  return out;
}

struct Shape {
  int64_t batch, heads, seq_q, seq_kv;
};

// Runs dense_mask on `shape` with random bindings and compares every element (and that the
// padding between rows is untouched) with the interpreter.
// `fixed` overrides the random value of the f32 params it names.
void check_program(const AttentionProgram& prog, std::mt19937_64& rng, Shape s,
                   const std::map<std::string, float>& fixed = {}) {
  SCOPED_TRACE(fmt::format("program {} on B={} H={} Sq={} Skv={}\n{}", prog.name, s.batch, s.heads,
                           s.seq_q, s.seq_kv, print_program(prog)));
  std::map<std::string, int64_t> dims;
  std::vector<HostBuffer> buffers;
  Bindings bind;
  EvalContext ctx;
  for (const BufferDecl& d : prog.buffers) {
    for (const std::string& dim : d.dims)
      if (!dims.contains(dim)) dims[dim] = 1 + static_cast<int64_t>(rng() % 48);
    buffers.push_back(make_buffer(rng, d, dims));
  }
  for (size_t i = 0; i < prog.buffers.size(); ++i) {
    bind.buffer(prog.buffers[i].name, buffers[i].tensor);
    ctx.buffers[prog.buffers[i].name] = buffers[i].view;
  }
  for (const ParamDecl& p : prog.params) {
    if (p.type == Type::I32) {
      int32_t v = static_cast<int32_t>(rng() % 45) - 4;
      bind.param(p.name, v);
      ctx.params[p.name] = int64_t{v};
    } else {
      float v = fixed.contains(p.name)
                    ? fixed.at(p.name)
                    : static_cast<float>(static_cast<int>(rng() % 17) - 8) * 0.5f;
      bind.param(p.name, v);
      ctx.params[p.name] = double{v};
    }
  }

  const int64_t pitch = s.seq_kv + 3;
  const size_t bytes = static_cast<size_t>(s.batch * s.heads * s.seq_q * pitch);
  DeviceBuffer out(std::max<size_t>(bytes, 1));
  out.fill_bytes(kPoison);
  TensorView view{out.data(),
                  DType::U8,
                  {s.batch, s.heads, s.seq_q, s.seq_kv},
                  {s.heads * s.seq_q * pitch, s.seq_q * pitch, pitch, 1},
                  TensorView::Where::Device,
                  "mask"};
  dense_mask(prog, bind, view, nullptr);
  Driver::get()->context_synchronize();
  std::vector<unsigned char> got = out.to_host<unsigned char>();

  CompiledEval mask(prog.mask, ctx);
  int64_t mismatches = 0;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t q = 0; q < s.seq_q; ++q) {
        const unsigned char* row = got.data() + ((b * s.heads + h) * s.seq_q + q) * pitch;
        for (int64_t kv = 0; kv < pitch; ++kv) {
          int expected = kv < s.seq_kv ? (mask.eval_mask(b, h, q, kv) ? 1 : 0) : kPoison;
          if (row[kv] != expected && mismatches++ < 5)
            ADD_FAILURE() << fmt::format("at b={} h={} q={} kv={}: got {}, expected {}", b, h, q,
                                         kv, row[kv], expected);
        }
      }
  EXPECT_EQ(mismatches, 0);
}

class DenseMaskGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no GPU: " << Driver::unavailable_reason();
    Driver::get()->use_device(0);
    fmt::print("TILEJIT_TEST_SEED={}\n", seed_);
  }
  Shape random_shape() {
    return {1 + static_cast<int64_t>(rng_() % 2), 1 + static_cast<int64_t>(rng_() % 3),
            1 + static_cast<int64_t>(rng_() % 70), 1 + static_cast<int64_t>(rng_() % 300)};
  }
  // Fresh inputs every run; TILEJIT_TEST_SEED replays one (each test prints its seed).
  uint64_t seed_ = std::getenv("TILEJIT_TEST_SEED")
                       ? std::strtoull(std::getenv("TILEJIT_TEST_SEED"), nullptr, 10)
                       : std::random_device{}();
  std::mt19937_64 rng_{seed_};
};

TEST_F(DenseMaskGpu, StandardPrograms) {
  for (const AttentionProgram& p : stdlib::standard_attention_programs())
    for (int i = 0; i < 3; ++i) check_program(p, rng_, random_shape());
}

TEST_F(DenseMaskGpu, HandBuiltPrograms) {
  Expr grad;
  for (auto make : {golden_doc_softcap, golden_select_branches, golden_plain})
    for (int i = 0; i < 3; ++i) check_program(make(&grad), rng_, random_shape());
}

bool has_float_node(const Expr& e) {
  bool found = false;
  ir::visit_post_order(e, [&](const Expr& n) { found |= n.type() == Type::F32; });
  return found;
}

// Random masks of integer and boolean nodes only: those must match the interpreter exactly
// (float masks may differ by the hardware approximations and FMA contraction).
TEST_F(DenseMaskGpu, RandomIntegerMasks) {
  RandomProgramOptions opt;
  opt.use_transcendentals = false;
  int checked = 0;
  for (int tries = 0; checked < 24 && tries < 2000; ++tries) {
    AttentionProgram p = random_attention_program(rng_, opt);
    if (has_float_node(p.mask)) continue;
    check_program(p, rng_, random_shape());
    ++checked;
  }
  EXPECT_GE(checked, 12);
}

// i32 wrapping, division and remainder by zero and by -1, and saturating f32 -> i32 casts of
// NaN, infinities and out-of-range values.
TEST_F(DenseMaskGpu, IntegerAndCastEdgeCases) {
  using namespace dsl;
  AttentionProgram wrap;
  wrap.name = "wrap";
  Expr big = q * 1000000007 + kv * 2147483647;
  wrap.mask = big / (kv - 3) % (q - 5) + big % (kv - 1) / (h - 1) > (-(q * 999999937)) % 7;
  for (int i = 0; i < 3; ++i) check_program(wrap, rng_, random_shape());

  AttentionProgram casts;
  casts.name = "casts";
  casts.params = {{"x", Type::F32}};
  Param x("x", Type::F32);
  casts.mask = i32(Expr(x) * f32(kv - 2)) > q * 40000000 - 3;
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 3e9f, -3e9f, 1.5f, 7.9e7f})
    check_program(casts, rng_, {1, 1, 70, 9}, {{"x", v}});
}

// More query rows than a grid's y dimension allows (65535): the kernel loops over them.
TEST_F(DenseMaskGpu, LongQuerySequence) {
  AttentionProgram p;
  p.name = "causal";
  p.mask = stdlib::causal();
  check_program(p, rng_, {1, 1, 70000, 3});
}

TEST_F(DenseMaskGpu, EmptyOutputLaunchesNothing) {
  AttentionProgram p;
  p.name = "causal";
  p.mask = stdlib::causal();
  check_program(p, rng_, {1, 2, 0, 5});
}

}  // namespace
}  // namespace tilejit::testing
