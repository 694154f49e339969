// The attention API's contract without a GPU: every misuse is a UserError naming the tensor (or
// the block mask, or the binding) at fault, raised before anything is launched; host tensors run
// on the CPU executor and match the fp64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

#include "compiler/Error.h"
#include "dsl/TextForm.h"
#include "runtime/Attention.h"
#include "runtime/AttentionTma.h"
#include "runtime/Driver.h"
#include "runtime/MaskAnalysis.h"
#include "tests/attention/AttentionTestSupport.h"

namespace tilejit::testing {
namespace {

using Where = TensorView::Where;

const char* kDocCausal = R"(
attention doc_causal {
  buffer doc : i32[B, S]
  mask = doc[b, q] == doc[b, kv] && q >= kv
})";

// Views of fake, well-aligned memory: validation never dereferences it.
TensorView fake(DType dtype, std::vector<int64_t> shape, Where where, std::string name) {
  alignas(64) static unsigned char storage[64];
  void* data = where == Where::Host ? static_cast<void*>(storage)
                                    : reinterpret_cast<void*>(uintptr_t{1} << 32);
  return TensorView::contiguous(data, dtype, std::move(shape), where, std::move(name));
}

// A valid forward call on fake tensors (B 2, Hq 4, Hkv 2, Sq 100, Skv 80, D 64) that each
// misuse case breaks in one place.
struct Call {
  AttentionProgram program = parse_attention(kDocCausal);
  Where where;
  TensorView q, k, v, out, lse, d_out, dq, dk, dv, doc;
  Bindings bind;
  BlockMask mask;
  AttentionOptions options;

  explicit Call(Where w, DType dt = DType::BF16) : where(w) {
    q = fake(dt, {2, 4, 100, 64}, w, "q");
    k = fake(dt, {2, 2, 80, 64}, w, "k");
    v = fake(dt, {2, 2, 80, 64}, w, "v");
    out = fake(dt, {2, 4, 100, 64}, w, "out");
    lse = fake(DType::F32, {2, 4, 100}, w, "lse");
    d_out = fake(dt, {2, 4, 100, 64}, w, "d_out");
    dq = fake(dt, {2, 4, 100, 64}, w, "dq");
    dk = fake(dt, {2, 2, 80, 64}, w, "dk");
    dv = fake(dt, {2, 2, 80, 64}, w, "dv");
    doc = fake(DType::I32, {2, 100}, w, "doc");
    bind.buffer("doc", doc);
    mask = BlockMask::from_classifier({.batch = 2, .seq_q = 100, .seq_kv = 80},
                                      [](int, int, int, int) { return TileClass::Partial; });
  }
  void forward() const {
    attention_forward(program, q, k, v, bind, mask, options, nullptr, out, lse);
  }
  void backward() const {
    attention_backward(program, q, k, v, out, lse, d_out, bind, mask, options, nullptr, dq, dk, dv);
  }
};

// Runs `call` and expects a UserError whose message contains every one of `words`.
void expect_user_error(const std::function<void()>& call, std::vector<std::string> words) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one mentioning '" << words[0] << "'";
  } catch (const UserError& e) {
    for (const std::string& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
          << "message lacks '" << w << "': " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a UserError: " << e.what();
  }
}

// The Hopper kernels' tensor maps, as cuTensorMapEncodeTiled receives them: dims innermost first,
// byte strides of the outer dims, the boxes the kernels' shared-memory layouts assume. The
// expected values are spelled out from the layouts, not computed by the code under test.
TEST(AttentionApi, TensorMapsDescribeTheOperandsAndTheDqAccumulator) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t B = 1 + rng() % 3, H = 1 + rng() % 5, S = rng() % 300, D = rng() % 2 ? 64 : 128;
    // A strided operand: [B, H, S, D] stored as [B, S, H, D] with padding between batches.
    const int64_t stride_s = H * D, stride_h = D, stride_b = (S + 3) * H * D;
    const int64_t shape[4] = {B, H, S, D}, strides[3] = {stride_b, stride_h, stride_s};
    const bool f16 = trial % 2 == 0;
    TiledTensorMapArgs q = attention_tensor_map_args(reinterpret_cast<void*>(0x1000), shape,
                                                     strides, f16);
    EXPECT_EQ(q.type, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    EXPECT_EQ(q.rank, 4u);
    const cuuint64_t dims[4] = {cuuint64_t(D), cuuint64_t(S > 0 ? S : 1), cuuint64_t(H),
                                cuuint64_t(B)};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(q.dims[i], dims[i]) << "operand dim " << i;
    if (S > 1) EXPECT_EQ(q.strides[0], cuuint64_t(stride_s * 2));
    if (H > 1) EXPECT_EQ(q.strides[1], cuuint64_t(stride_h * 2));
    if (B > 1) EXPECT_EQ(q.strides[2], cuuint64_t(stride_b * 2));
    for (cuuint64_t st : q.strides) EXPECT_EQ(st % 16, 0u);
    EXPECT_EQ(q.box[0], 64u);
    EXPECT_EQ(q.box[1], 64u);
    EXPECT_EQ(q.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);

    float* acc = reinterpret_cast<float*>(0x2000);
    TiledTensorMapArgs dq = dq_accum_tensor_map_args(acc, shape);
    EXPECT_EQ(dq.type, CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
    EXPECT_EQ(dq.address, acc);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(dq.dims[i], dims[i]) << "dq dim " << i;
    // Packed fp32 [B, H, S, D]: a row is D floats, a head S rows, a batch H heads.
    const int64_t rows = S > 0 ? S : 1;
    EXPECT_EQ(dq.strides[0], cuuint64_t(D * 4));
    EXPECT_EQ(dq.strides[1], cuuint64_t(rows * D * 4));
    EXPECT_EQ(dq.strides[2], cuuint64_t(H * rows * D * 4));
    EXPECT_EQ(dq.box[0] * 4, 128u);  // one 128-byte swizzle span of floats
    EXPECT_EQ(dq.box[1], 16u);       // one warp's q rows of a step
    EXPECT_EQ(dq.box[2], 1u);
    EXPECT_EQ(dq.box[3], 1u);
    EXPECT_EQ(dq.swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  }
}

TEST(AttentionApi, ShapeMisuseNamesTheTensor) {
  for (Where w : {Where::Host, Where::Device}) {
    SCOPED_TRACE(w == Where::Host ? "host" : "device");
    {
      Call c(w);
      c.q = fake(DType::BF16, {2, 4, 100}, w, "q");
      expect_user_error([&] { c.forward(); }, {"q", "rank 4"});
    }
    {
      Call c(w);
      c.k = fake(DType::BF16, {2, 2, 80, 32}, w, "k");
      expect_user_error([&] { c.forward(); }, {"k", "64"});
    }
    {
      Call c(w);
      c.k = fake(DType::BF16, {3, 2, 80, 64}, w, "k");
      expect_user_error([&] { c.forward(); }, {"k", "dimension 0"});
    }
    {
      Call c(w);
      c.v = fake(DType::BF16, {2, 2, 81, 64}, w, "v");
      expect_user_error([&] { c.forward(); }, {"v", "81"});
    }
    {
      Call c(w);
      c.k = fake(DType::BF16, {2, 3, 80, 64}, w, "k");
      c.v = fake(DType::BF16, {2, 3, 80, 64}, w, "v");
      expect_user_error([&] { c.forward(); }, {"'q'", "'k'", "multiple"});
    }
    {
      Call c(w);
      c.out = fake(DType::BF16, {2, 4, 99, 64}, w, "out");
      expect_user_error([&] { c.forward(); }, {"out", "99"});
    }
    {
      Call c(w);
      c.lse = fake(DType::F32, {2, 4, 100, 1}, w, "lse");
      expect_user_error([&] { c.forward(); }, {"lse", "rank 3"});
    }
    {
      Call c(w);
      c.dk = fake(DType::BF16, {2, 2, 79, 64}, w, "dk");
      expect_user_error([&] { c.backward(); }, {"dk", "79"});
    }
    {
      Call c(w);
      c.dq = fake(DType::BF16, {2, 4, 100, 64, 1}, w, "dq");
      expect_user_error([&] { c.backward(); }, {"dq", "rank 4"});
    }
  }
}

TEST(AttentionApi, DtypeMisuseNamesTheTensor) {
  for (Where w : {Where::Host, Where::Device}) {
    {
      Call c(w);
      c.k = fake(DType::F16, {2, 2, 80, 64}, w, "k");
      expect_user_error([&] { c.forward(); }, {"k", "f16", "bf16"});
    }
    {
      Call c(w);
      c.lse = fake(DType::BF16, {2, 4, 100}, w, "lse");
      expect_user_error([&] { c.forward(); }, {"lse", "f32"});
    }
    {
      Call c(w);
      c.d_out = fake(DType::F16, {2, 4, 100, 64}, w, "d_out");
      expect_user_error([&] { c.backward(); }, {"d_out", "bf16"});
    }
  }
  Call c(Where::Device, DType::F32);
  expect_user_error([&] { c.forward(); }, {"q", "bf16 or f16"});
}

TEST(AttentionApi, GpuLayoutMisuseNamesTheTensor) {
  const Where w = Where::Device;
  {
    Call c(w);
    c.q = fake(DType::BF16, {2, 4, 100, 96}, w, "q");
    c.out = fake(DType::BF16, {2, 4, 100, 96}, w, "out");
    c.k = fake(DType::BF16, {2, 2, 80, 96}, w, "k");
    c.v = fake(DType::BF16, {2, 2, 80, 96}, w, "v");
    expect_user_error([&] { c.forward(); }, {"'q'", "head dim 96", "64 and 128"});
  }
  {
    Call c(w);
    c.q.data = static_cast<char*>(c.q.data) + 8;
    expect_user_error([&] { c.forward(); }, {"q", "aligned to 16"});
  }
  {
    Call c(w);
    c.k.strides = {2 * 80 * 68, 80 * 68, 68, 1};
    expect_user_error([&] { c.forward(); }, {"'k'", "multiple of 8"});
  }
  {
    Call c(w);
    c.v.strides = {2 * 80 * 64, 80 * 64, 1, 80};
    expect_user_error([&] { c.forward(); }, {"v", "contiguous"});
  }
  {
    Call c(w);
    c.lse.strides = {4 * 100 * 2, 100 * 2, 2};
    expect_user_error([&] { c.forward(); }, {"lse", "contiguous"});
  }
  {
    Call c(w);
    c.k.where = Where::Host;
    expect_user_error([&] { c.forward(); }, {"'k'", "host memory"});
  }
  {
    Call c(w);
    c.options.scale = std::nanf("");
    expect_user_error([&] { c.forward(); }, {"scale"});
  }
}

TEST(AttentionApi, BlockMaskAndBindingMisuse) {
  for (Where w : {Where::Host, Where::Device}) {
    {
      Call c(w);
      c.mask = BlockMask::from_classifier({.seq_q = 100, .seq_kv = 81},
                                          [](int, int, int, int) { return TileClass::Full; });
      expect_user_error([&] { c.forward(); }, {"block_mask", "81"});
    }
    {
      Call c(w);
      c.mask = BlockMask::from_classifier({.batch = 3, .seq_q = 100, .seq_kv = 80},
                                          [](int, int, int, int) { return TileClass::Full; });
      expect_user_error([&] { c.backward(); }, {"block_mask", "batch 3"});
    }
    {
      Call c(w);
      c.mask = BlockMask::from_classifier({.heads = 2, .seq_q = 100, .seq_kv = 80},
                                          [](int, int, int, int) { return TileClass::Full; });
      expect_user_error([&] { c.forward(); }, {"block_mask", "heads 2"});
    }
    {
      Call c(w);
      c.bind = Bindings{};
      expect_user_error([&] { c.forward(); }, {"doc", "not bound"});
    }
    {
      Call c(w);
      c.bind = Bindings{{"doc", fake(DType::I32, {2, 100},
                                     w == Where::Host ? Where::Device : Where::Host, "doc")}};
      expect_user_error([&] { c.forward(); }, {"doc", "memory"});
    }
  }
  Call c(Where::Device);
  c.mask = BlockMask::from_classifier({.seq_q = 100, .seq_kv = 80, .block_q = 64, .block_kv = 64},
                                      [](int, int, int, int) { return TileClass::Full; });
  expect_user_error([&] { c.forward(); }, {"block_mask", "block_q = 128"});
}

// A valid call on fake device memory gets past validation and then needs a GPU: without one it
// is a UserError saying so, with one the fake pointers are refused.
TEST(AttentionApi, DeviceTensorsNeedAGpu) {
  Call c(Where::Device);
  if (!gpu_available())
    expect_user_error([&] { c.forward(); }, {"no GPU"});
  else
    expect_user_error([&] { c.forward(); }, {"'q'", "not a device pointer"});
}

// Host tensors run on the CPU executor: O and lse against the fp64 reference, on a
// [B, S, H, D] layout with GQA, odd lengths and a per-batch document mask.
TEST(AttentionApi, HostTensorsRunOnTheCpu) {
  std::mt19937_64 rng(7);
  AttentionProgram prog = parse_attention(kDocCausal);
  const int B = 2, Hq = 4, Hkv = 2, Sq = 77, Skv = 77, D = 24;
  TestTensor q(DType::F32, {B, Hq, Sq, D}, true, "q"), k(DType::F32, {B, Hkv, Skv, D}, true, "k");
  TestTensor v(DType::F32, {B, Hkv, Skv, D}, true, "v"),
      out(DType::F32, {B, Hq, Sq, D}, false, "out");
  TestTensor lse(DType::F32, {B, Hq, Sq}, false, "lse");
  q.fill_random(rng, 1), k.fill_random(rng, 1), v.fill_random(rng, 1);
  out.fill(std::nan("")), lse.fill(std::nan(""));
  BoundValues bound = bind_random(prog, B, Hq, Sq, rng, false);
  LoweredAttention lowered = lower(prog);
  BlockMask mask = reference_block_mask(
      lowered, bound.host,
      mask_extents(
          lowered.program.mask,
          {.batch = B, .heads = Hq, .seq_q = Sq, .seq_kv = Skv, .block_q = 16, .block_kv = 8}));
  attention_forward(prog, q.host_view(), k.host_view(), v.host_view(), bound.host, mask, {},
                    nullptr, out.host_view(), lse.host_view());
  EvalContext ctx = host_eval_context(lowered.program, bound.host);
  ReferenceHooks ref = reference_hooks(lowered, ctx);
  auto want = attention_forward_reference({B, Hq, Hkv, Sq, Skv, D, 1 / std::sqrt(double(D))},
                                          ref.hooks(), q.values(), k.values(), v.values());
  EXPECT_LT(rel_l2(out.values(), want.out), 1e-5);
  std::vector<double> got_lse = lse.values();
  for (size_t i = 0; i < got_lse.size(); ++i) ASSERT_NEAR(got_lse[i], want.lse[i], 1e-4) << i;
}

// Which GPU forward runs: the Hopper kernel on sm_90a unless asked otherwise (the option first,
// then TILEJIT_ATTENTION_PATH), the portable one elsewhere; asking for the Hopper kernel on
// another arch, or an unknown TILEJIT_ATTENTION_PATH, is a UserError saying why.
TEST(AttentionApi, ForwardPathFollowsTheOptionTheEnvironmentAndTheArch) {
  const char* saved = std::getenv("TILEJIT_ATTENTION_PATH");
  const std::string saved_value = saved ? saved : "";
  using P = AttentionPath;
  using M = AttentionModule;
  unsetenv("TILEJIT_ATTENTION_PATH");
  EXPECT_EQ(attention_forward_module(P::Auto, "sm_90a"), M::ForwardSm90);
  EXPECT_EQ(attention_forward_module(P::Auto, "sm_80"), M::Forward);
  EXPECT_EQ(attention_forward_module(P::Auto, "sm_100"), M::Forward);
  EXPECT_EQ(attention_forward_module(P::Portable, "sm_90a"), M::Forward);
  EXPECT_EQ(attention_forward_module(P::Sm90, "sm_90a"), M::ForwardSm90);
  expect_user_error([] { attention_forward_module(P::Sm90, "sm_89"); }, {"sm_90a", "sm_89"});
  setenv("TILEJIT_ATTENTION_PATH", "portable", 1);
  EXPECT_EQ(attention_forward_module(P::Auto, "sm_90a"), M::Forward);
  EXPECT_EQ(attention_forward_module(P::Sm90, "sm_90a"), M::ForwardSm90);
  setenv("TILEJIT_ATTENTION_PATH", "sm90", 1);
  EXPECT_EQ(attention_forward_module(P::Auto, "sm_90a"), M::ForwardSm90);
  EXPECT_EQ(attention_forward_module(P::Portable, "sm_90a"), M::Forward);
  expect_user_error([] { attention_forward_module(P::Auto, "sm_80"); }, {"sm_90a", "sm_80"});
  setenv("TILEJIT_ATTENTION_PATH", "hopper", 1);
  expect_user_error([] { attention_forward_module(P::Auto, "sm_90a"); },
                    {"TILEJIT_ATTENTION_PATH", "hopper"});
  if (saved)
    setenv("TILEJIT_ATTENTION_PATH", saved_value.c_str(), 1);
  else
    unsetenv("TILEJIT_ATTENTION_PATH");
}

// Which GPU backward runs: the Hopper kernels on sm_90a and the portable ones elsewhere unless
// asked otherwise (the option first, then TILEJIT_ATTENTION_BWD_PATH); the Hopper ones on
// another arch, or an unknown TILEJIT_ATTENTION_BWD_PATH, are a UserError saying why.
// Deterministic mode picks the deterministic module of the chosen path.
TEST(AttentionApi, BackwardPathFollowsTheArchUnlessAskedOtherwise) {
  const char* saved = std::getenv("TILEJIT_ATTENTION_BWD_PATH");
  const std::string saved_value = saved ? saved : "";
  using P = AttentionPath;
  using M = AttentionModule;
  unsetenv("TILEJIT_ATTENTION_BWD_PATH");
  EXPECT_EQ(attention_backward_module(P::Auto, "sm_90a", false), M::BackwardSm90);
  EXPECT_EQ(attention_backward_module(P::Auto, "sm_90a", true), M::BackwardSm90Deterministic);
  EXPECT_EQ(attention_backward_module(P::Auto, "sm_80", false), M::Backward);
  EXPECT_EQ(attention_backward_module(P::Portable, "sm_90a", false), M::Backward);
  EXPECT_EQ(attention_backward_module(P::Sm90, "sm_90a", false), M::BackwardSm90);
  EXPECT_EQ(attention_backward_module(P::Sm90, "sm_90a", true), M::BackwardSm90Deterministic);
  expect_user_error([] { attention_backward_module(P::Sm90, "sm_89", false); },
                    {"sm_90a", "sm_89"});
  setenv("TILEJIT_ATTENTION_BWD_PATH", "sm90", 1);
  EXPECT_EQ(attention_backward_module(P::Auto, "sm_90a", false), M::BackwardSm90);
  EXPECT_EQ(attention_backward_module(P::Auto, "sm_90a", true), M::BackwardSm90Deterministic);
  EXPECT_EQ(attention_backward_module(P::Portable, "sm_90a", false), M::Backward);
  expect_user_error([] { attention_backward_module(P::Auto, "sm_80", false); },
                    {"sm_90a", "sm_80"});
  setenv("TILEJIT_ATTENTION_BWD_PATH", "portable", 1);
  EXPECT_EQ(attention_backward_module(P::Auto, "sm_90a", false), M::Backward);
  EXPECT_EQ(attention_backward_module(P::Sm90, "sm_90a", false), M::BackwardSm90);
  setenv("TILEJIT_ATTENTION_BWD_PATH", "hopper", 1);
  expect_user_error([] { attention_backward_module(P::Auto, "sm_90a", false); },
                    {"TILEJIT_ATTENTION_BWD_PATH", "hopper"});
  // The forward's variable does not choose the backward.
  unsetenv("TILEJIT_ATTENTION_BWD_PATH");
  const char* saved_fwd = std::getenv("TILEJIT_ATTENTION_PATH");
  const std::string saved_fwd_value = saved_fwd ? saved_fwd : "";
  setenv("TILEJIT_ATTENTION_PATH", "portable", 1);
  EXPECT_EQ(attention_backward_module(P::Auto, "sm_90a", false), M::BackwardSm90);
  if (saved_fwd)
    setenv("TILEJIT_ATTENTION_PATH", saved_fwd_value.c_str(), 1);
  else
    unsetenv("TILEJIT_ATTENTION_PATH");
  if (saved)
    setenv("TILEJIT_ATTENTION_BWD_PATH", saved_value.c_str(), 1);
  else
    unsetenv("TILEJIT_ATTENTION_BWD_PATH");
}

}  // namespace
}  // namespace tilejit::testing
