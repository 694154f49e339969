// The attention kernels through the public API against the fp64 reference
// (tests/support/AttentionReference.h, hooks from the interpreter): every standard mask and
// score mod, combinations, and random programs, on random shapes (odd lengths, GQA, both memory
// layouts, both dtypes, both head dims), forward and backward (atomic and deterministic), with
// every output poisoned first. Block masks come from the mask analysis (sound) or from
// evaluating every element. On an sm_90a device every forward and every backward runs on both
// paths, the portable kernels and the Hopper ones (AttentionPath). Skipped without a GPU.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <random>
#include <thread>

#include "dsl/TextForm.h"
#include "runtime/Attention.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/MaskAnalysis.h"
#include "tests/attention/AttentionTestSupport.h"
#include "tests/support/RandomProgram.h"
#include "tests/support/SourceTree.h"

namespace tilejit::testing {
namespace {

struct Shape {
  int batch, heads_q, heads_kv, seq_q, seq_kv, dim;
  DType dtype;
  bool bshd;
};

// Programs beyond the examples: no mask, fully masked rows, and combinations.
const char* const kExtraPrograms[] = {
    "attention full { mask = true }",
    "attention masked_rows { mask = q % 4 != 1 && (q < 200 || q >= 260) && (q + kv) % 3 != 0 }",
    R"(attention doc_window_alibi {
         buffer doc : i32[B, S]
         buffer slopes : f32[H]
         param window : i32
         mask = doc[b, q] == doc[b, kv] && q >= kv && q - kv < window
         score = score + slopes[h] * f32(kv - q)
       })",
    R"(attention prefix_softcap {
         buffer prefix : i32[B]
         param cap : f32
         mask = kv < prefix[b] || q >= kv
         score = cap * tanh(score / cap)
       })",
    R"(attention row_column_bias {
         buffer rows : f32[H, S]
         buffer cols : f32[B, S]
         param w : f32
         mask = q >= kv || kv < 64
         score = rows[h, q] + score - 0.05 * f32(q - kv) - w * cols[b, kv]
       })",
    R"(attention chunked_scaled {
         param chunk : i32
         param temp : f32
         mask = q / chunk == kv / chunk
         score = score * temp - 0.25 * abs(f32(q - kv)) / 64.0
       })",
};

std::vector<AttentionProgram> standard_programs() {
  std::vector<AttentionProgram> out;
  std::vector<std::filesystem::path> files;
  for (const auto& e :
       std::filesystem::directory_iterator(tilejit::testing::examples_dir()))
    if (e.path().extension() == ".tj") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    ParsedProgram p = load_program(f.string());
    if (auto* a = std::get_if<AttentionProgram>(&p)) out.push_back(*a);
  }
  for (const char* text : kExtraPrograms) out.push_back(parse_attention(text));
  return out;
}

// Values that make the standard programs interesting at test sizes.
void tune_bindings(BoundValues& bound, const Shape& s, std::mt19937_64& rng, bool gpu) {
  auto set_i32 = [&](const char* name, int lo, int hi) {
    if (!bound.host.find_param(name)) return;
    int v = std::uniform_int_distribution<int>(lo, std::max(lo, hi))(rng);
    bound.host.param(name, v);
    if (gpu) bound.device.param(name, v);
  };
  set_i32("window", 40, 300);
  set_i32("chunk", 33, 200);
  set_i32("img_start", 0, s.seq_q / 2);
  if (bound.host.find_param("img_end")) {
    int start = std::get<int32_t>(*bound.host.find_param("img_start"));
    set_i32("img_end", start + 1, s.seq_q);
  }
  for (auto& t : bound.buffers)
    if (t->host_view().name == "prefix") {
      for (int64_t i = 0; i < t->numel(); ++i)
        t->set(i, std::uniform_int_distribution<int>(0, s.seq_kv)(rng));
      if (gpu) t->upload();
    }
}

int g_cases = 0;

void check_close(const char* what, const std::vector<double>& got, const std::vector<double>& want,
                 double tol) {
  // Relative L2 with an absolute floor: where every row has one unmasked element the exact dQ
  // and dK are 0 and a kernel returns fp32 rounding residue (~1e-7), which is correct.
  double err = rel_l2(got, want, 1e-3);
  EXPECT_LE(err, tol) << what;
}

void check_lse(const std::vector<double>& got, const std::vector<double>& want) {
  std::vector<double> g, w;
  for (size_t i = 0; i < want.size(); ++i) {
    bool want_inf = std::isinf(want[i]);
    ASSERT_EQ(want_inf, std::isinf(got[i]) && got[i] < 0) << "lse row " << i << ": " << got[i];
    if (!want_inf) g.push_back(got[i]), w.push_back(want[i]);
  }
  check_close("lse", g, w, 2e-3);
}

// Runs one case; false when the reference is not finite (a random program may overflow), so
// the caller can draw another.
bool run_case(const AttentionProgram& prog, const Shape& s, uint64_t seed, bool analysed,
              bool gpu = true, std::optional<float> scale = std::nullopt) {
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(fmt::format("{} {} D={} B={} Hq={} Hkv={} Sq={} Skv={} {} {} mask", prog.name,
                           dtype_name(s.dtype), s.dim, s.batch, s.heads_q, s.heads_kv, s.seq_q,
                           s.seq_kv, s.bshd ? "BSHD" : "BHSD", analysed ? "analysed" : "exact"));
  BoundValues bound = bind_random(prog, s.batch, s.heads_q, std::max(s.seq_q, s.seq_kv), rng, gpu);
  tune_bindings(bound, s, rng, gpu);
  LoweredAttention lowered = lower(prog);
  BlockMaskShape ms =
      mask_extents(lowered.program.mask,
                   {.batch = s.batch, .heads = s.heads_q, .seq_q = s.seq_q, .seq_kv = s.seq_kv});
  // The hooks evaluated as f32 hardware does (IR.h: f32 arithmetic is IEEE single precision):
  // in fp64 a float comparison or cast in a mask can flip, and the kernels compute in f32.
  EvalContext ctx = host_eval_context(lowered.program, bound.host);
  ctx.precision = FloatPrecision::F32;
  BlockMask mask = analysed ? analyse_block_mask(lowered, bound.host, ms)
                            : reference_block_mask(lowered.program.mask, ctx, ms);

  const std::vector<int64_t> qs{s.batch, s.heads_q, s.seq_q, s.dim};
  const std::vector<int64_t> ks{s.batch, s.heads_kv, s.seq_kv, s.dim};
  TestTensor q(s.dtype, qs, s.bshd, "q"), k(s.dtype, ks, s.bshd, "k"), v(s.dtype, ks, s.bshd, "v");
  TestTensor d_out(s.dtype, qs, s.bshd, "d_out"), out(s.dtype, qs, s.bshd, "out");
  TestTensor dq(s.dtype, qs, s.bshd, "dq"), dk(s.dtype, ks, s.bshd, "dk"),
      dv(s.dtype, ks, s.bshd, "dv");
  TestTensor lse(DType::F32, {s.batch, s.heads_q, s.seq_q}, false, "lse");
  for (TestTensor* t : {&q, &k, &v, &d_out}) t->fill_random(rng, 1.5);

  ReferenceHooks ref = reference_hooks(lowered, ctx);
  const double ref_scale = scale ? double(*scale) : 1 / std::sqrt(double(s.dim));
  AttentionRefShape rs{s.batch, s.heads_q, s.heads_kv, s.seq_q, s.seq_kv, s.dim, ref_scale};
  auto fwd_ref = attention_forward_reference(rs, ref.hooks(), q.values(), k.values(), v.values());
  // The backward reference takes delta from the output the backward is given (the kernel's own);
  // both overflow together, so a case is drawn again when the exact one is not finite.
  auto exact_bwd = attention_backward_reference(rs, ref.hooks(), q.values(), k.values(), v.values(),
                                                d_out.values());
  for (const auto* vec : {&fwd_ref.out, &exact_bwd.dq, &exact_bwd.dk, &exact_bwd.dv})
    for (double x : *vec)
      if (!std::isfinite(x)) return false;
  ++g_cases;

  const double tol = s.dtype == DType::BF16 ? 2e-2 : 1e-2;
  auto view = [&](TestTensor& t) { return gpu ? t.device_view() : t.host_view(); };
  auto poison = [&](TestTensor& t) { gpu ? t.poison_device() : t.fill(std::nan("")); };
  auto finish = [&](std::initializer_list<TestTensor*> ts) {
    if (!gpu) return;
    Driver::get()->context_synchronize();
    for (TestTensor* t : ts) t->download();
  };
  const Bindings& bind = gpu ? bound.device : bound.host;
  std::vector<AttentionPath> paths{AttentionPath::Portable};
  if (gpu && device_arch(0) == "sm_90a") paths.push_back(AttentionPath::Sm90);
  for (AttentionPath path : paths) {  // the backwards below get the last path's output
    SCOPED_TRACE(path == AttentionPath::Sm90 ? "sm90 forward" : "portable forward");
    poison(out), poison(lse);
    attention_forward(prog, view(q), view(k), view(v), bind, mask,
                      {.scale = scale, .deterministic = false, .forward_path = path}, nullptr,
                      view(out), view(lse));
    finish({&out, &lse});
    check_close("out", out.values(), fwd_ref.out, tol);
    check_lse(lse.values(), fwd_ref.lse);
  }
  const std::vector<double> given_out = out.values();
  auto bwd_ref = attention_backward_reference(rs, ref.hooks(), q.values(), k.values(), v.values(),
                                              d_out.values(), &given_out);

  for (AttentionPath path : paths) {
    SCOPED_TRACE(path == AttentionPath::Sm90 ? "sm90 backward" : "portable backward");
    std::vector<double> first[3];
    for (int mode = 0; mode < 3; ++mode) {  // atomic, deterministic, deterministic again
      const bool det = mode > 0;
      for (TestTensor* t : {&dq, &dk, &dv}) poison(*t);
      attention_backward(
          prog, view(q), view(k), view(v), view(out), view(lse), view(d_out), bind, mask,
          AttentionOptions{.scale = scale, .deterministic = det, .backward_path = path}, nullptr,
          view(dq), view(dk), view(dv));
      finish({&dq, &dk, &dv});
      if (mode == 2) {
        EXPECT_EQ(dq.values(), first[0]) << "deterministic dQ differs between runs";
        EXPECT_EQ(dk.values(), first[1]);
        EXPECT_EQ(dv.values(), first[2]);
        break;
      }
      if (mode == 1) first[0] = dq.values(), first[1] = dk.values(), first[2] = dv.values();
      SCOPED_TRACE(det ? "deterministic" : "atomic");
      check_close("dq", dq.values(), bwd_ref.dq, tol);
      check_close("dk", dk.values(), bwd_ref.dk, tol);
      check_close("dv", dv.values(), bwd_ref.dv, tol);
    }
  }
  return true;
}

// Every program on every shape, analysed block masks, seeds from `seed` on.
void run_every_case(std::initializer_list<AttentionProgram> programs,
                    std::initializer_list<Shape> shapes, uint64_t seed) {
  for (const AttentionProgram& p : programs)
    for (const Shape& s : shapes) EXPECT_TRUE(run_case(p, s, seed++, true)) << p.name;
}

Shape random_shape(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int groups[] = {1, 2, 4};
  Shape s;
  s.heads_kv = pick(1, 2);
  s.heads_q = s.heads_kv * groups[pick(0, 2)];
  s.batch = pick(1, 2);
  s.seq_q = pick(1, 420);
  s.seq_kv = pick(0, 3) == 0 ? s.seq_q : pick(1, 420);
  s.dim = pick(0, 1) ? 128 : 64;
  s.dtype = pick(0, 1) ? DType::BF16 : DType::F16;
  s.bshd = pick(0, 1) == 1;
  return s;
}

struct Case {
  AttentionProgram program;
  Shape shape;
  uint64_t seed;
  bool analysed;
};

AttentionVariant variant_of(const Shape& s) { return attention_variant(s.dtype, s.dim); }

// Compiles every module the cases need on all cores first (NVRTC is seconds per module and a
// launch compiles on its calling thread); the cases then find them in the kernel cache.
void warm_kernel_cache(const std::vector<Case>& cases) {
  std::vector<std::pair<const AttentionProgram*, AttentionVariant>> work;
  for (const Case& c : cases) work.emplace_back(&c.program, variant_of(c.shape));
  const std::string arch = device_arch(0);
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < work.size();)
      for (const AttentionKernelSource& s :
           attention_kernel_sources(*work[i].first, work[i].second))
        KernelCache::global().get(attention_kernel_spec(s, work[i].first->name), arch);
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, std::thread::hardware_concurrency()); ++t)
    threads.emplace_back(worker);
  for (auto& t : threads) t.join();
}

class AttentionGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu_available()) GTEST_SKIP() << "no GPU: " << Driver::unavailable_reason();
  }
};

// Every standard program on two of four fixed shapes (rotating) covering both dtypes, head dims
// and layouts, GQA and odd lengths, with exact and analysed block masks.
TEST_F(AttentionGpu, StandardPrograms) {
  const Shape shapes[] = {{2, 4, 2, 300, 300, 128, DType::BF16, false},
                          {1, 2, 2, 257, 511, 64, DType::F16, true},
                          {2, 4, 1, 511, 200, 128, DType::F16, true},
                          {1, 3, 3, 129, 129, 64, DType::BF16, false}};
  std::vector<Case> cases;
  uint64_t seed = 1;
  std::vector<AttentionProgram> programs = standard_programs();
  for (size_t i = 0; i < programs.size(); ++i) {
    cases.push_back({programs[i], shapes[i % 4], seed++, true});
    cases.push_back({programs[i], shapes[(i + 2) % 4], seed++, false});
  }
  warm_kernel_cache(cases);
  for (const Case& c : cases)
    EXPECT_TRUE(run_case(c.program, c.shape, c.seed, c.analysed)) << c.program.name;
}

// At least 50 random programs (no special-float constants) on random shapes; a program whose
// reference overflows is replaced by the next.
TEST_F(AttentionGpu, RandomPrograms) {
  std::mt19937_64 rng(0xfeed);
  RandomProgramOptions opt;
  opt.max_depth = 4;
  opt.use_special_floats = false;
  std::vector<Case> cases;
  for (int i = 0; i < 80; ++i) {
    AttentionProgram p = random_attention_program(rng, opt);
    p.name = fmt::format("random_{}", i);
    Shape s = random_shape(rng);
    cases.push_back({p, s, rng(), i % 2 == 0});
  }
  cases.resize(60);  // compiled ahead; the rest only if some of these are replaced
  warm_kernel_cache(cases);
  int passed = 0;
  rng.seed(0xfeed);
  for (int i = 0; i < 80 && passed < 50 && !HasFailure(); ++i) {
    AttentionProgram p = random_attention_program(rng, opt);
    p.name = fmt::format("random_{}", i);
    Shape s = random_shape(rng);
    if (run_case(p, s, rng(), i % 2 == 0)) ++passed;
  }
  EXPECT_GE(passed, 50);
}

// Shapes never recompile: a program across many shapes, bound values and masks, one kernel per
// head dim. Two programs: the causal one's backward splits its element pass, the soft-cap's runs
// it in one pass (its score_grad reads score), so the sanitizers run on both.
TEST_F(AttentionGpu, EdgeShapes) {
  run_every_case(
      {parse_attention("attention causal { mask = q >= kv }"),
       parse_attention("attention capped { mask = q >= kv\n score = 30.0 * tanh(score / 30.0) }")},
      {{1, 1, 1, 1, 1, 64, DType::BF16, false},
       {1, 2, 1, 1, 700, 128, DType::F16, true},
       {1, 2, 2, 700, 1, 64, DType::BF16, true},
       {3, 2, 1, 128, 64, 128, DType::BF16, false},
       {1, 2, 1, 700, 700, 128, DType::BF16, true}},
      99);
}

// Enough heads that the runtime numbers the Hopper forward's work in bands
// (runtime/AttentionSchedule.cpp: four items per head among the running CTAs; on a 132-SM H200 a
// band of 2 for 40 heads, 3 for 72), with q tiles that leave the last band narrower; and keys
// enough for the backward's bands of 16 key blocks to end in a narrower one (18 blocks at 2200).
TEST_F(AttentionGpu, ManyHeadsInBands) {
  run_every_case({parse_attention("attention causal { mask = q >= kv }"),
                  parse_attention("attention window { mask = q >= kv && q - kv < 200 }")},
                 {{5, 8, 8, 640, 640, 64, DType::BF16, false},
                  {9, 8, 2, 520, 520, 128, DType::F16, true},
                  {1, 2, 1, 2200, 2200, 64, DType::BF16, false}},
                 41);
}

// The Hopper backward is persistent: a CTA per SM takes key-block items from a counter, its ring
// and its K and V tiles running on from one item to the next. Here its grid is capped at 3 CTAs
// (TILEJIT_ATTENTION_BWD_CTAS), so the three share 28-56 items of uneven lengths per launch
// (about 9-19 each), some with no step at all (keys in odd 256-blocks attend nothing), with and
// without GQA, at D 64 and 128; atomic and deterministic, against the reference. (The portable
// path ignores the cap.)
TEST_F(AttentionGpu, BackwardSeveralItemsPerCta) {
  struct CapGrid {
    CapGrid() { setenv("TILEJIT_ATTENTION_BWD_CTAS", "3", 1); }
    ~CapGrid() { unsetenv("TILEJIT_ATTENTION_BWD_CTAS"); }
  } cap;
  run_every_case(
      {parse_attention("attention odd_keys { mask = q >= kv && (kv / 256) % 2 == 0 }"),
       parse_attention("attention window { mask = q >= kv && q - kv < 300 }")},
      {{2, 4, 4, 800, 800, 64, DType::F16, true},
       {2, 8, 2, 800, 800, 64, DType::BF16, false},
       {2, 8, 4, 700, 700, 128, DType::BF16, false}},
      77);
}

// dQ across launches of several shapes in turn on one stream (the largest first, so the per-stream
// scratch and its fp32 dQ accumulator are reused with another layout each time), each against the
// reference; q tiles that no key block visits (every other 256 rows here) must still
// get dQ = 0 over outputs poisoned first. Any scheme that keeps backward state between launches
// (the dQ accumulator kept zeroed by the kernel that sums it, bench/NOTES.md thirty-first
// session) has to pass this.
TEST_F(AttentionGpu, BackwardDqAcrossShapes) {
  for (uint64_t seed : {123, 129})  // two rounds: each shape follows the others once
    run_every_case(
        {parse_attention("attention striped { mask = q >= kv && (q / 256) % 2 == 0 }"),
         parse_attention("attention causal { mask = q >= kv }")},
        {{2, 4, 2, 900, 900, 128, DType::BF16, false},
         {1, 3, 1, 333, 600, 64, DType::F16, true},
         {1, 2, 2, 260, 260, 128, DType::BF16, true}},
        seed);
}

// The forward's softmax moves a warp's reference only when a row's maximum grows by more than
// 2^8 (OnlineSoftmax's lazy rescale): a bias rising along kv makes it move at most steps, one
// falling along kv never after the first, a steep one in the middle of the row once late; rows
// long enough for many 128-column steps; a soft-capped one whose first rows are empty. A negative
// scale takes the forward off the raw-product exponent (which needs scale > 0) on an identity
// score_mod.
TEST_F(AttentionGpu, RescaleAcrossSteps) {
  const Shape shapes[] = {{1, 2, 1, 300, 1100, 128, DType::BF16, false},
                          {1, 2, 2, 1100, 1100, 64, DType::F16, true}};
  const char* programs[] = {
      "attention rising { score = score + f32(kv) * 0.03 }",
      "attention falling { mask = q >= kv\n score = score - f32(kv) * 0.03 }",
      "attention step { score = score + select(kv >= 600, 12.0, 0.0) }",
      // score_mod with a tanh per element: a share of the forward's exponentials on the FMA
      // pipe (fma_exp2), which must give exact zeros for masked elements and empty rows (q < 300)
      "attention capped_rising { mask = q >= kv + 300\n"
      " score = 20.0 * tanh(score / 20.0) + f32(kv) * 0.03 }"};
  std::vector<Case> cases;
  uint64_t seed = 7;
  for (const char* text : programs)
    for (const Shape& s : shapes) cases.push_back({parse_attention(text), s, seed++, true});
  warm_kernel_cache(cases);
  for (const Case& c : cases) EXPECT_TRUE(run_case(c.program, c.shape, c.seed, c.analysed));
  AttentionProgram causal = parse_attention("attention causal { mask = q >= kv }");
  for (const Shape& s : shapes) EXPECT_TRUE(run_case(causal, s, seed++, true, true, -0.06f));
}

// The same cases on host tensors run on the CPU executor (no GPU needed): the harness, the
// reference and the dispatch agree before any kernel is involved.
TEST(AttentionHostPath, StandardAndRandomPrograms) {
  const Shape shapes[] = {{2, 4, 2, 150, 150, 64, DType::BF16, true},
                          {1, 2, 1, 97, 211, 32, DType::F32, false}};
  uint64_t seed = 5;
  std::vector<AttentionProgram> programs = standard_programs();
  for (size_t i = 0; i < programs.size(); ++i)
    EXPECT_TRUE(run_case(programs[i], shapes[i % 2], seed++, i % 2 == 0, false))
        << programs[i].name;
  std::mt19937_64 rng(0xc0de);
  RandomProgramOptions opt;
  opt.max_depth = 4;
  opt.use_special_floats = false;
  int passed = 0;
  for (int i = 0; i < 40 && passed < 12 && !HasFailure(); ++i) {
    AttentionProgram p = random_attention_program(rng, opt);
    Shape s = random_shape(rng);
    s.seq_q = 1 + s.seq_q / 3, s.seq_kv = 1 + s.seq_kv / 3;
    if (run_case(p, s, rng(), i % 2 == 0, false)) ++passed;
  }
  EXPECT_GE(passed, 12);
}

}  // namespace
}  // namespace tilejit::testing
