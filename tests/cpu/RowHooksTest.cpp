// Row hooks: the LLVM-compiled hooks give exactly the interpreter's values (FloatPrecision::F32
// semantics) for every example program and hundreds of random programs, on random points in
// and just outside the bound shapes; and the backend choice behaves as documented.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <random>

#include "compiler/Error.h"
#include "compiler/Printer.h"
#include "dsl/TextForm.h"
#include "runtime/cpu/RowHooks.h"
#include "tests/cpu/CpuTestSupport.h"
#include "tests/support/RandomProgram.h"
#include "tests/support/SourceTree.h"
#ifdef TILEJIT_HAVE_LLVM
#include "runtime/cpu/LlvmHooks.h"
#endif

namespace tilejit::testing {
namespace {

const std::map<std::string, int64_t> kDims = {{"B", 2}, {"H", 3}, {"S", 9}, {"N", 5}, {"V", 17}};

// Same value: NaN equals NaN, and -0 equals +0 (min/max of two zeros may return either).
bool same(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

std::vector<float> random_row(std::mt19937_64& rng, int n) {
  std::uniform_real_distribution<float> u(-8, 8);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  if (n > 2) v[1] = 0.0f;
  return v;
}

// Compares two attention hook sets on `points` random row segments.
void compare_attention(const AttentionRowHooks& a, const AttentionRowHooks& b, std::mt19937_64& rng,
                       int points, const std::string& what) {
  std::uniform_int_distribution<int> small(-1, 3), pos(-2, 11), len(1, 13);
  for (int i = 0; i < points; ++i) {
    int bb = small(rng), h = small(rng), q = pos(rng), kv0 = pos(rng), n = len(rng);
    bool check = rng() % 2;
    std::vector<float> x = random_row(rng, n), y = x;
    a.apply_score_row(bb, h, q, kv0, n, x.data(), check);
    b.apply_score_row(bb, h, q, kv0, n, y.data(), check);
    for (int j = 0; j < n; ++j)
      ASSERT_TRUE(same(x[j], y[j])) << what << ": score at b=" << bb << " h=" << h << " q=" << q
                                    << " kv=" << kv0 + j << ": " << x[j] << " vs " << y[j];
    std::vector<float> raw = random_row(rng, n), ga = x, gb = x;
    a.score_grad_row(bb, h, q, kv0, n, raw.data(), ga.data());
    b.score_grad_row(bb, h, q, kv0, n, raw.data(), gb.data());
    for (int j = 0; j < n; ++j)
      ASSERT_TRUE(same(ga[j], gb[j])) << what << ": score_grad at kv=" << kv0 + j << " raw "
                                      << raw[j] << ": " << ga[j] << " vs " << gb[j];
    std::vector<uint8_t> ka(n), kb(n);
    a.mask_row(bb, h, q, kv0, n, ka.data());
    b.mask_row(bb, h, q, kv0, n, kb.data());
    ASSERT_EQ(ka, kb) << what << ": mask at b=" << bb << " h=" << h << " q=" << q;
  }
}

void compare_loss(const LossRowHooks& a, const LossRowHooks& b, std::mt19937_64& rng, int points,
                  const std::string& what) {
  std::uniform_int_distribution<int> row(-1, 6), id(-2, 20), len(1, 13);
  for (int i = 0; i < points; ++i) {
    int r = row(rng), id0 = id(rng), n = len(rng);
    std::vector<float> x = random_row(rng, n), y = x;
    a.logit_row(r, id0, n, x.data());
    b.logit_row(r, id0, n, y.data());
    for (int j = 0; j < n; ++j)
      ASSERT_TRUE(same(x[j], y[j])) << what << ": logit at row=" << r << " id=" << id0 + j << ": "
                                    << x[j] << " vs " << y[j];
    std::vector<float> raw = random_row(rng, n), ga(n), gb(n);
    a.logit_grad_row(r, id0, n, raw.data(), ga.data());
    b.logit_grad_row(r, id0, n, raw.data(), gb.data());
    for (int j = 0; j < n; ++j)
      ASSERT_TRUE(same(ga[j], gb[j])) << what << ": logit_grad at row=" << r << " id=" << id0 + j
                                      << " raw " << raw[j] << ": " << ga[j] << " vs " << gb[j];
  }
}

void compare_program(const ParsedProgram& program, std::mt19937_64& rng, int points) {
  if (const auto* att = std::get_if<AttentionProgram>(&program)) {
    LoweredAttention p = lower(*att);
    SCOPED_TRACE(print_program(p.program));
    BoundValues bound = bind_random(p.program.buffers, p.program.params, kDims, rng);
    auto interp = make_row_hooks(p, bound.bindings, HookBackend::Interpreter);
    auto jit = make_row_hooks(p, bound.bindings, HookBackend::Llvm);
    ASSERT_EQ(jit->backend(), "llvm");
    compare_attention(*interp, *jit, rng, points, att->name);
  } else {
    LoweredLoss p = lower(std::get<LossProgram>(program));
    SCOPED_TRACE(print_program(p.program));
    BoundValues bound = bind_random(p.program.buffers, p.program.params, kDims, rng);
    auto interp = make_row_hooks(p, bound.bindings, HookBackend::Interpreter);
    auto jit = make_row_hooks(p, bound.bindings, HookBackend::Llvm);
    compare_loss(*interp, *jit, rng, points, p.program.name);
  }
}

TEST(RowHooks, BackendChoice) {
  LoweredAttention p = lower(parse_attention("attention causal {\n mask = q >= kv\n}\n"));
  auto hooks = make_row_hooks(p, {});
  if (have_llvm_hooks()) {
    EXPECT_EQ(hooks->backend(), "llvm");
  } else {
    EXPECT_EQ(hooks->backend(), "interpreter");
    EXPECT_THROW(make_row_hooks(p, {}, HookBackend::Llvm), UserError);
  }
  EXPECT_EQ(make_row_hooks(p, {}, HookBackend::Interpreter)->backend(), "interpreter");
  std::vector<uint8_t> keep(6);
  hooks->mask_row(0, 0, 3, 0, 6, keep.data());
  EXPECT_EQ(keep, (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
}

TEST(RowHooks, BindingsAreChecked) {
  LoweredAttention p = lower(parse_attention(
      "attention doc {\n buffer doc : i32[B, S]\n mask = doc[b, q] == doc[b, kv]\n}\n"));
  EXPECT_THROW(make_row_hooks(p, {}), UserError);  // doc unbound
}

TEST(RowHooks, LlvmMatchesInterpreterOnExamplePrograms) {
  if (!have_llvm_hooks()) GTEST_SKIP() << "built without LLVM";
  std::mt19937_64 rng(7);
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tilejit::testing::examples_dir())) {
    if (entry.path().extension() != ".tj") continue;
    SCOPED_TRACE(entry.path().string());
    compare_program(load_program(entry.path().string()), rng, 300);
    ++count;
  }
  EXPECT_GE(count, 10);
}

TEST(RowHooks, LlvmMatchesInterpreterOnRandomPrograms) {
  if (!have_llvm_hooks()) GTEST_SKIP() << "built without LLVM";
  std::mt19937_64 rng(99);
  for (int i = 0; i < 220; ++i) {
    SCOPED_TRACE(fmt::format("random attention program {}", i));
    compare_program(random_attention_program(rng), rng, 40);
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (int i = 0; i < 120; ++i) {
    SCOPED_TRACE(fmt::format("random loss program {}", i));
    compare_program(random_loss_program(rng), rng, 40);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

#ifdef TILEJIT_HAVE_LLVM
TEST(RowHooks, CompiledCodeOutlivesTheCache) {
  LoweredAttention p = lower(parse_attention(
      "attention capped {\n param cap : f32\n mask = q >= kv\n score = cap * tanh(score / cap)\n}\n"));
  Bindings bind{{"cap", 2.0f}};
  auto first = make_row_hooks(p, bind, HookBackend::Llvm);
  clear_llvm_hook_cache();
  auto second = make_row_hooks(p, bind, HookBackend::Llvm);
  std::vector<float> a{1.0f, 3.0f}, b = a;
  first->apply_score_row(0, 0, 1, 0, 2, a.data(), true);
  second->apply_score_row(0, 0, 1, 0, 2, b.data(), true);
  EXPECT_EQ(a, b);
  EXPECT_FLOAT_EQ(a[0], 2.0f * std::tanh(0.5f));
  EXPECT_EQ(a[1], 2.0f * static_cast<float>(std::tanh(1.5)));
}
#endif

}  // namespace
}  // namespace tilejit::testing
