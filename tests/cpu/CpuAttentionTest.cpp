// CPU attention forward and backward against the fp64 brute-force reference, for the example
// programs, random programs, GQA/MQA, both layouts, odd and unequal lengths, 16-bit dtypes and
// all-masked rows; plus a check that no empty tile is visited and no full tile evaluates the mask.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "compiler/Error.h"
#include "dsl/Expr.h"
#include "dsl/TextForm.h"
#include "runtime/cpu/CpuAttention.h"
#include "tests/cpu/CpuTestSupport.h"
#include "tests/support/RandomProgram.h"
#include "tests/support/SourceTree.h"

namespace tilejit::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

AttentionProgram example(const std::string& name) {
  return std::get<AttentionProgram>(
      load_program(tilejit::testing::examples_dir() + "/" + name + ".tj"));
}

struct Case {
  int batch = 2, heads_q = 2, heads_kv = 1, seq_q = 130, seq_kv = 130, dim = 32;
  int block_q = 32, block_kv = 16;
  DType dtype = DType::F32;
  bool bshd = false;
  bool backward = true;
  uint64_t seed = 1;
  HookBackend backend = HookBackend::Auto;
};

// Outputs of one CPU run, as contiguous doubles.
struct CpuRun {
  std::vector<double> out, lse, dq, dk, dv;
};

double tolerance_scale(DType d) { return d == DType::F32 ? 1.0 : d == DType::F16 ? 8.0 : 60.0; }

// Runs forward (and backward) on the CPU and the reference, and checks them against each other.
CpuRun check_case(const AttentionProgram& program, const Case& c) {
  SCOPED_TRACE(fmt::format("program {} B={} Hq={} Hkv={} Sq={} Skv={} D={} dtype={} bshd={}",
                           program.name, c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_kv, c.dim,
                           dtype_name(c.dtype), c.bshd));
  LoweredAttention lowered = lower(program);
  std::mt19937_64 rng(c.seed);
  BoundValues bound = bind_random(lowered.program.buffers, lowered.program.params,
                                  {{"B", c.batch}, {"H", c.heads_q}, {"S", std::max(c.seq_q, c.seq_kv)}},
                                  rng);
  EvalContext ctx = eval_context(bound.bindings);
  int mask_batch = ir::uses_var(lowered.program.mask, var::b) || ir::reads_buffers(lowered.program.mask) ? c.batch : 1;
  int mask_heads = ir::uses_var(lowered.program.mask, var::h) || ir::reads_buffers(lowered.program.mask) ? c.heads_q : 1;
  BlockMask mask = brute_force_block_mask(lowered.program, ctx, mask_batch, mask_heads, c.seq_q,
                                          c.seq_kv, c.block_q, c.block_kv);
  auto hooks = make_row_hooks(lowered, bound.bindings, c.backend);

  auto tensor = [&](int heads, int seq, const char* name) {
    return make_attention_tensor(c.dtype, c.batch, heads, seq, c.dim, c.bshd, name);
  };
  HostTensor q = tensor(c.heads_q, c.seq_q, "q"), k = tensor(c.heads_kv, c.seq_kv, "k"),
             v = tensor(c.heads_kv, c.seq_kv, "v"), out = tensor(c.heads_q, c.seq_q, "out");
  fill_random(q, rng, 1.5);
  fill_random(k, rng, 1.5);
  fill_random(v, rng, 1.0);
  out.fill(kNaN);
  HostTensor lse = HostTensor::make(DType::F32, {c.batch, c.heads_q, c.seq_q}, "lse");
  lse.fill(kNaN);
  cpu_attention_forward(*hooks, mask, {.q = q.view, .k = k.view, .v = v.view, .out = out.view, .lse = lse.view});

  AttentionRefShape shape{c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_kv, c.dim,
                          1.0 / std::sqrt(static_cast<double>(c.dim))};
  ReferenceHooks ref = reference_hooks(lowered, ctx);
  std::vector<double> qd = to_doubles(q), kd = to_doubles(k), vd = to_doubles(v);
  AttentionRefForward want = attention_forward_reference(shape, ref.hooks(), qd, kd, vd);
  CpuRun run;
  run.out = to_doubles(out);
  run.lse.assign(reinterpret_cast<const float*>(lse.bytes.data()),
                 reinterpret_cast<const float*>(lse.bytes.data()) + lse.storage_elems());
  const double ts = tolerance_scale(c.dtype);
  EXPECT_LE(scaled_error(run.out, want.out, 1e-4 * ts, 1e-4 * ts), 1.0) << "O";
  EXPECT_LE(scaled_error(run.lse, want.lse, 1e-4, 1e-4), 1.0) << "lse";
  if (!c.backward) return run;

  HostTensor d_out = tensor(c.heads_q, c.seq_q, "d_out");
  fill_random(d_out, rng, 1.0);
  HostTensor dq = tensor(c.heads_q, c.seq_q, "dq"), dk = tensor(c.heads_kv, c.seq_kv, "dk"),
             dv = tensor(c.heads_kv, c.seq_kv, "dv");
  dq.fill(kNaN);
  dk.fill(kNaN);
  dv.fill(kNaN);
  cpu_attention_backward(*hooks, mask,
                         {.q = q.view, .k = k.view, .v = v.view, .out = out.view, .lse = lse.view,
                          .d_out = d_out.view, .d_q = dq.view, .d_k = dk.view, .d_v = dv.view});
  AttentionRefBackward grads =
      attention_backward_reference(shape, ref.hooks(), qd, kd, vd, to_doubles(d_out));
  run.dq = to_doubles(dq);
  run.dk = to_doubles(dk);
  run.dv = to_doubles(dv);
  EXPECT_LE(scaled_error(run.dq, grads.dq, 2e-4 * ts, 1e-3 * ts), 1.0) << "dQ";
  EXPECT_LE(scaled_error(run.dk, grads.dk, 2e-4 * ts, 1e-3 * ts), 1.0) << "dK";
  EXPECT_LE(scaled_error(run.dv, grads.dv, 2e-4 * ts, 1e-3 * ts), 1.0) << "dV";
  return run;
}

TEST(CpuAttention, Causal) { check_case(example("causal"), {}); }

TEST(CpuAttention, CausalUnequalLengths) {
  check_case(example("causal"), {.batch = 1, .seq_q = 70, .seq_kv = 151});
  check_case(example("causal"), {.batch = 1, .seq_q = 151, .seq_kv = 70});
}

TEST(CpuAttention, SlidingWindow) { check_case(example("sliding_window"), {.seq_q = 201, .seq_kv = 201}); }

TEST(CpuAttention, Document) { check_case(example("document_causal"), {.heads_q = 4, .heads_kv = 2}); }

TEST(CpuAttention, PrefixLm) { check_case(example("prefix_lm"), {.seq_q = 99, .seq_kv = 99}); }

TEST(CpuAttention, AlibiGqaBshd) {
  check_case(example("alibi_causal"), {.heads_q = 4, .heads_kv = 2, .bshd = true});
}

TEST(CpuAttention, SoftcapMqa) {
  check_case(example("softcap_causal"), {.batch = 1, .heads_q = 3, .heads_kv = 1, .dim = 48});
}

TEST(CpuAttention, ChunkedAndImageBlock) {
  check_case(example("chunked_causal"), {.batch = 1, .seq_q = 160, .seq_kv = 160});
  check_case(example("image_block_or_causal"), {.batch = 1, .seq_q = 140, .seq_kv = 140});
}

TEST(CpuAttention, DocSoftcapBf16AndF16) {
  check_case(example("doc_softcap"), {.dtype = DType::BF16, .bshd = true});
  check_case(example("doc_softcap"), {.dtype = DType::F16});
}

TEST(CpuAttention, DefaultTilesLongerSequence) {
  check_case(example("causal"), {.batch = 1, .heads_q = 1, .seq_q = 300, .seq_kv = 300, .dim = 64,
                                 .block_q = 128, .block_kv = 64});
}

TEST(CpuAttention, AllMaskedRowsAreZeroWithoutNaN) {
  // Rows q < 5 see nothing; batch entry 0 sees nothing at all.
  AttentionProgram p = parse_attention("attention shifted {\n mask = q >= kv + 5 && b != 0\n}\n");
  CpuRun r = check_case(p, {.seq_q = 67, .seq_kv = 67});
  for (double x : r.out) ASSERT_FALSE(std::isnan(x));
  for (double x : r.dq) ASSERT_FALSE(std::isnan(x));
  for (double x : r.dk) ASSERT_FALSE(std::isnan(x));
  EXPECT_EQ(r.lse[0], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.out[0], 0.0);
}

TEST(CpuAttention, InterpreterAndLlvmGiveTheSameBits) {
  Case c{.seq_q = 77, .seq_kv = 77, .backend = HookBackend::Interpreter};
  CpuRun a = check_case(example("doc_softcap"), c);
  c.backend = HookBackend::Auto;
  CpuRun b = check_case(example("doc_softcap"), c);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
}

TEST(CpuAttention, BackwardIsDeterministic) {
  Case c{.heads_q = 4, .heads_kv = 2, .seq_q = 90, .seq_kv = 90};
  CpuRun a = check_case(example("alibi_causal"), c);
  CpuRun b = check_case(example("alibi_causal"), c);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
}

TEST(CpuAttention, RandomPrograms) {
  std::mt19937_64 rng(2024);
  RandomProgramOptions opt;
  opt.max_depth = 4;
  opt.use_special_floats = false;
  for (int i = 0; i < 24; ++i) {
    AttentionProgram p = random_attention_program(rng, opt);
    // The score gets a bounded, score-independent bias: a random function of the score itself
    // could jump between the reference's fp64 scores and the executor's fp32 ones.
    Expr bias = random_expr(rng, Type::F32, {dsl::b, dsl::h, dsl::q, dsl::kv}, {}, p.buffers,
                            p.params, 3, opt);
    p.score = dsl::score + min(max(bias, -3.0), 3.0);
    SCOPED_TRACE(fmt::format("random program {}", i));
    check_case(p, {.batch = 2, .heads_q = 2, .heads_kv = 1, .seq_q = 45 + i, .seq_kv = 45 + i,
                   .dim = 16, .block_q = 16, .block_kv = 8, .seed = static_cast<uint64_t>(i)});
  }
}

// Wraps hooks and checks each call against the block mask: no empty tile is ever scored, a full
// tile never asks for the mask, a partial tile always does.
class VisitChecker final : public AttentionRowHooks {
 public:
  VisitChecker(const AttentionRowHooks& inner, const BlockMask& mask)
      : AttentionRowHooks(inner.traits()), inner_(inner), mask_(mask) {}
  std::string_view backend() const override { return inner_.backend(); }
  void apply_score_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n, float* s,
                       bool check_mask) const override {
    TileClass c = tile(b, h, q, kv0);
    if (c == TileClass::Empty) ++empty_visits;
    if (c == TileClass::Full && check_mask) ++full_masked;
    if (c == TileClass::Partial && !check_mask) ++partial_unmasked;
    ++calls;
    inner_.apply_score_row(b, h, q, kv0, n, s, check_mask);
  }
  void score_grad_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n, const float* raw,
                      float* grad) const override {
    if (tile(b, h, q, kv0) == TileClass::Empty) ++empty_visits;
    inner_.score_grad_row(b, h, q, kv0, n, raw, grad);
  }
  void mask_row(int32_t b, int32_t h, int32_t q, int32_t kv0, int32_t n, uint8_t* keep) const override {
    inner_.mask_row(b, h, q, kv0, n, keep);
  }
  mutable std::atomic<int64_t> calls{0}, empty_visits{0}, full_masked{0}, partial_unmasked{0};

 private:
  TileClass tile(int b, int h, int q, int kv0) const {
    const BlockMaskShape& s = mask_.shape();
    return mask_.tile_class(s.batch == 1 ? 0 : b, s.heads == 1 ? 0 : h, q / s.block_q, kv0 / s.block_kv);
  }
  const AttentionRowHooks& inner_;
  const BlockMask& mask_;
};

TEST(CpuAttention, VisitsOnlyListedTilesAndMasksOnlyPartialOnes) {
  LoweredAttention lowered = lower(example("softcap_causal"));
  Bindings bind{{"cap", 4.0f}};
  const int S = 200, D = 16;
  BlockMask mask = brute_force_block_mask(lowered.program, eval_context(bind), 1, 1, S, S, 32, 16);
  BlockMask::Counts counts = mask.counts();
  ASSERT_GT(counts.empty, 0);
  ASSERT_GT(counts.full, 0);
  auto inner = make_row_hooks(lowered, bind);
  VisitChecker hooks(*inner, mask);
  std::mt19937_64 rng(5);
  HostTensor q = make_attention_tensor(DType::F32, 1, 2, S, D, false, "q"), k = q, v = q, out = q,
             d_out = q, dq = q, dk = q, dv = q;
  for (HostTensor* t : {&q, &k, &v, &out, &d_out, &dq, &dk, &dv}) {
    t->view.data = t->bytes.data();
    fill_random(*t, rng, 1.0);
  }
  HostTensor lse = HostTensor::make(DType::F32, {1, 2, S}, "lse");
  cpu_attention_forward(hooks, mask, {.q = q.view, .k = k.view, .v = v.view, .out = out.view, .lse = lse.view});
  cpu_attention_backward(hooks, mask,
                         {.q = q.view, .k = k.view, .v = v.view, .out = out.view, .lse = lse.view,
                          .d_out = d_out.view, .d_q = dq.view, .d_k = dk.view, .d_v = dv.view});
  // Forward + dQ + dK/dV each score every listed tile row once.
  const int64_t listed_rows = [&] {
    int64_t rows = 0;
    for (int qt = 0; qt < mask.q_tiles(); ++qt)
      for (int kt = 0; kt < mask.kv_tiles(); ++kt)
        if (mask.tile_class(0, 0, qt, kt) != TileClass::Empty) rows += std::min(32, S - qt * 32);
    return rows;
  }();
  EXPECT_EQ(hooks.calls.load(), 3 * 2 * listed_rows);
  EXPECT_EQ(hooks.empty_visits.load(), 0);
  EXPECT_EQ(hooks.full_masked.load(), 0);
  EXPECT_EQ(hooks.partial_unmasked.load(), 0);
}

TEST(CpuAttention, RejectsBadTensors) {
  LoweredAttention lowered = lower(example("causal"));
  auto hooks = make_row_hooks(lowered, {});
  BlockMask mask = brute_force_block_mask(lowered.program, eval_context({}), 1, 1, 10, 10, 4, 4);
  HostTensor q = make_attention_tensor(DType::F32, 1, 3, 10, 8, false, "q");
  HostTensor k = make_attention_tensor(DType::F32, 1, 2, 10, 8, false, "k");
  HostTensor lse = HostTensor::make(DType::F32, {1, 3, 10}, "lse");
  EXPECT_THROW(cpu_attention_forward(*hooks, mask, {.q = q.view, .k = k.view, .v = k.view,
                                                   .out = q.view, .lse = lse.view}),
               UserError);  // 3 query heads over 2 kv heads
  HostTensor i = HostTensor::make(DType::I32, {1, 3, 10, 8}, "q_int");
  EXPECT_THROW(cpu_attention_forward(*hooks, mask, {.q = i.view, .k = q.view, .v = q.view,
                                                   .out = q.view, .lse = lse.view}),
               UserError);
}

}  // namespace
}  // namespace tilejit::testing
