// Soundness of the interval evaluation: random programs (the general generator and the
// mask-shaped one) x random bindings x random boxes, each verdict checked against every point
// of the box evaluated by the interpreter. A TRUE or FALSE verdict contradicted by any point
// fails. The CI run checks 2*10^4 boxes; TILEJIT_LONG_FUZZ=1 checks 10^6.
#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <random>

#include "compiler/BufferSummary.h"
#include "compiler/Error.h"
#include "compiler/IntervalEval.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "tests/compiler/RandomBindings.h"
#include "tests/mask/MaskPrograms.h"
#include "tests/support/RandomProgram.h"

namespace tilejit::testing {
namespace {

bool long_fuzz() {
  const char* v = std::getenv("TILEJIT_LONG_FUZZ");
  return v != nullptr && v[0] == '1';
}

struct Tally {
  int64_t cases = 0, decided = 0, exact = 0, truth_decided = 0;
};

// Summaries of every buffer the mask reads, with a random granule (any granule is sound).
struct Oracle {
  std::map<std::string, BufferSummary, std::less<>> summaries;
  std::unique_ptr<SummaryOracle> oracle;
  Oracle(const IntervalEval& eval, const EvalContext& ctx, std::mt19937_64& rng) {
    for (auto [name, plan] : plan_buffer_summaries(eval, 1 + rng() % 8, 1 + rng() % 8))
      summaries.emplace(name, BufferSummary(ctx.buffers.at(name), plan));
    oracle = std::make_unique<SummaryOracle>(eval, summaries);
  }
};

IndexBox random_box(std::mt19937_64& rng, int64_t batch, int64_t heads, int64_t seq) {
  IndexBox box;
  int64_t extent[4] = {batch, heads, seq, seq};
  for (int d = 0; d < 4; ++d) {
    int64_t width = d < 2 ? 1 + rng() % 2 : 1 + rng() % (rng() % 4 == 0 ? 24 : 8);
    box.lo[d] = static_cast<int64_t>(rng() % static_cast<uint64_t>(extent[d]));
    box.hi[d] = box.lo[d] + width - 1;
  }
  return box;
}

// Checks `boxes` boxes of one program; returns false after the first unsound verdict.
bool check_program(const Expr& mask, const EvalContext& ctx, std::mt19937_64& rng, int boxes,
                   int64_t batch, int64_t heads, int64_t seq, Tally& tally) {
  IntervalEval eval(mask, ctx.params);
  Oracle oracle(eval, ctx, rng);
  EvalContext f32 = ctx;
  f32.precision = FloatPrecision::F32;
  CompiledEval ref64(mask, ctx), ref32(mask, f32);
  for (int i = 0; i < boxes; ++i) {
    IndexBox box = random_box(rng, batch, heads, seq);
    Tri t = eval.eval(box, oracle.oracle.get());
    bool any = false, all = true;
    for (int64_t b = box.lo[0]; b <= box.hi[0]; ++b)
      for (int64_t h = box.lo[1]; h <= box.hi[1]; ++h)
        for (int64_t q = box.lo[2]; q <= box.hi[2]; ++q)
          for (int64_t kv = box.lo[3]; kv <= box.hi[3]; ++kv)
            for (const CompiledEval* ref : {&ref64, &ref32}) {
              bool keep = ref->eval_mask(b, h, q, kv);
              any |= keep;
              all &= keep;
              if ((t == Tri::True && !keep) || (t == Tri::False && keep)) {
                ADD_FAILURE() << "unsound verdict " << (t == Tri::True ? "TRUE" : "FALSE")
                              << " for `" << print_expr(mask) << "` at b=" << b << " h=" << h
                              << " q=" << q << " kv=" << kv << " (box b[" << box.lo[0] << ","
                              << box.hi[0] << "] h[" << box.lo[1] << "," << box.hi[1] << "] q["
                              << box.lo[2] << "," << box.hi[2] << "] kv[" << box.lo[3] << ","
                              << box.hi[3] << "])";
                return false;
              }
            }
    ++tally.cases;
    bool truth_decided = !any || all;
    tally.truth_decided += truth_decided;
    tally.decided += t != Tri::Maybe;
    tally.exact += (t != Tri::Maybe) == truth_decided;
  }
  return true;
}

void report(const char* what, const Tally& t) {
  std::printf("%s: %lld boxes; truly uniform %.1f%%, decided %.1f%%, verdict exact %.1f%%\n", what,
              static_cast<long long>(t.cases), 100.0 * t.truth_decided / t.cases,
              100.0 * t.decided / t.cases, 100.0 * t.exact / t.cases);
}

TEST(IntervalFuzz, RandomProgramsAreSound) {
  int64_t total = long_fuzz() ? 500000 : 10000;
  std::mt19937_64 rng(20261129);
  Tally tally;
  while (tally.cases < total) {
    AttentionProgram p = random_attention_program(rng);
    LoweredAttention l;
    try {
      l = lower(p);
    } catch (const UserError&) {
      continue;  // a random program the validator rejects
    }
    RandomBindings bind(rng, l.program.buffers, l.program.params);
    if (!check_program(l.program.mask, bind.bindings(), rng, 20, 2, 3, 14, tally)) return;
    // The unsimplified mask exercises the rules on shapes the simplifier would fold.
    if (!check_program(p.mask, bind.bindings(), rng, 5, 2, 3, 14, tally)) return;
  }
  report("random programs", tally);
}

TEST(IntervalFuzz, MaskShapedProgramsAreSound) {
  int64_t total = long_fuzz() ? 500000 : 10000;
  std::mt19937_64 rng(7);
  Tally tally;
  while (tally.cases < total) {
    AttentionProgram p = random_mask_program(rng, 1 + static_cast<int>(rng() % 3));
    int seq = 8 + static_cast<int>(rng() % 40);
    MaskBindings bind = random_mask_bindings(rng, p, 2, 2, seq);
    if (!check_program(p.mask, bind.ctx, rng, 25, 2, 2, seq + 4, tally)) return;
  }
  report("mask-shaped programs", tally);
}

// i32 operations at the edges of the range (wrap, INT_MIN / -1, abs(INT_MIN), division and
// modulo by ranges through 0), compared with constants near the result.
TEST(IntervalFuzz, IntegerEdgesAreSound) {
  int64_t total = long_fuzz() ? 200000 : 5000;
  std::mt19937_64 rng(31);
  const int64_t kMin = std::numeric_limits<int32_t>::min(), kMax = std::numeric_limits<int32_t>::max();
  auto near = [&]() -> int64_t {
    switch (rng() % 4) {
      case 0: return kMin + static_cast<int64_t>(rng() % 8);
      case 1: return kMax - static_cast<int64_t>(rng() % 8);
      default: return static_cast<int64_t>(rng() % 17) - 8;
    }
  };
  static const Op ops[] = {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Mod, Op::Min, Op::Max};
  static const Op cmps[] = {Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge};
  Tally tally;
  EvalContext ctx;
  while (tally.cases < total) {
    // q + A and kv + B stay in i32 over the boxes below (q, kv < 16), so they are exact.
    Expr x = ir::make(Op::Add, {ir::make_var(var::q), ir::make_int(std::min(near(), kMax - 16))});
    Expr y = ir::make(Op::Add, {ir::make_var(var::kv), ir::make_int(std::min(near(), kMax - 16))});
    Expr v = ir::make(ops[rng() % 7], {x, y});
    if (rng() % 3 == 0) v = ir::make(rng() % 2 ? Op::Neg : Op::Abs, {v});
    Expr mask = ir::make(cmps[rng() % 6], {v, ir::make_int(near())});
    if (!check_program(mask, ctx, rng, 4, 1, 1, 10, tally)) return;
  }
  report("i32 edges", tally);
}

}  // namespace
}  // namespace tilejit::testing
