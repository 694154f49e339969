// A host application embedding tilejit. It builds two attention programs at run time, one with
// the C++ DSL and one from text, binds a captured buffer (document ids) and runtime params,
// classifies tiles by mask analysis, runs attention forward and backward, then a fused linear
// cross-entropy over a two-segment vocabulary. The tensors are host memory, so everything runs
// on the CPU backend. Every result is checked against the fp64 brute-force references of
// tests/support on fresh random inputs, with outputs poisoned first; the exit code is non-zero
// when a result is off.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "compiler/Error.h"
#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "dsl/Builders.h"
#include "dsl/Expr.h"
#include "dsl/Stdlib.h"
#include "dsl/TextForm.h"
#include "runtime/Attention.h"
#include "runtime/MaskAnalysis.h"
#include "runtime/cpu/CpuLinearCe.h"
#include "runtime/cpu/RowHooks.h"
#include "tests/support/AttentionReference.h"
#include "tests/support/LinearCeReference.h"

using namespace tilejit;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<float> random_floats(size_t n, std::mt19937_64& rng, double stddev = 1.0) {
  std::normal_distribution<float> normal(0.0f, float(stddev));
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// ‖got − ref‖ / ‖ref‖; a NaN anywhere (an element never written) is infinitely wrong.
double relative_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i])) return INFINITY;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

TensorView host_f32(std::vector<float>& v, std::vector<int64_t> shape, std::string name) {
  return TensorView::contiguous(v.data(), DType::F32, std::move(shape), TensorView::Where::Host,
                                std::move(name));
}

constexpr double kTolerance = 1e-4;  // f32 executors against fp64

struct AttentionShape {
  int batch = 2, heads_q = 4, heads_kv = 2, seq = 512, head_dim = 64;
};

// Forward and backward of `prog` on host tensors, checked against the fp64 reference whose
// mask and score are written out independently in `ref_hooks`.
bool run_attention(const AttentionProgram& prog, const Bindings& bind,
                   const testing::AttentionRefHooks& ref_hooks, const AttentionShape& s,
                   std::mt19937_64& rng) {
  auto t0 = Clock::now();
  BlockMask mask = analyse_block_mask(
      lower(prog), bind, {.batch = s.batch, .heads = s.heads_q, .seq_q = s.seq, .seq_kv = s.seq});
  const double mask_ms = ms_since(t0);
  const BlockMask::Counts c = mask.counts();

  const int64_t B = s.batch, Hq = s.heads_q, Hkv = s.heads_kv, S = s.seq, D = s.head_dim;
  std::vector<float> q = random_floats(B * Hq * S * D, rng),
                     k = random_floats(B * Hkv * S * D, rng),
                     v = random_floats(B * Hkv * S * D, rng),
                     d_out = random_floats(B * Hq * S * D, rng);
  // Outputs poisoned with NaN: an element the executor forgets shows up as an error.
  std::vector<float> out(q.size(), NAN), lse(B * Hq * S, NAN), dq(q.size(), NAN), dk(k.size(), NAN),
      dv(v.size(), NAN);
  TensorView qv = host_f32(q, {B, Hq, S, D}, "q"), kv = host_f32(k, {B, Hkv, S, D}, "k"),
             vv = host_f32(v, {B, Hkv, S, D}, "v"), dov = host_f32(d_out, {B, Hq, S, D}, "d_out"),
             outv = host_f32(out, {B, Hq, S, D}, "out"), lsev = host_f32(lse, {B, Hq, S}, "lse");

  // Twice: the first call JIT-compiles the program's hooks (LLVM), the second finds them cached.
  double fwd_ms[2];
  for (double& ms : fwd_ms) {
    std::fill(out.begin(), out.end(), NAN);
    std::fill(lse.begin(), lse.end(), NAN);
    t0 = Clock::now();
    attention_forward(prog, qv, kv, vv, bind, mask, {}, nullptr, outv, lsev);
    ms = ms_since(t0);
  }
  t0 = Clock::now();
  attention_backward(prog, qv, kv, vv, outv, lsev, dov, bind, mask, {}, nullptr,
                     host_f32(dq, {B, Hq, S, D}, "dq"), host_f32(dk, {B, Hkv, S, D}, "dk"),
                     host_f32(dv, {B, Hkv, S, D}, "dv"));
  const double bwd_ms = ms_since(t0);

  testing::AttentionRefShape shape{s.batch,
                                   s.heads_q,
                                   s.heads_kv,
                                   s.seq,
                                   s.seq,
                                   s.head_dim,
                                   1.0 / std::sqrt(double(s.head_dim))};
  auto ref = testing::attention_forward_reference(shape, ref_hooks, widen(q), widen(k), widen(v));
  auto ref_b = testing::attention_backward_reference(shape, ref_hooks, widen(q), widen(k), widen(v),
                                                     widen(d_out));
  double lse_err = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    bool same_inf = std::isinf(ref.lse[i]) && lse[i] == ref.lse[i];
    lse_err = std::max(lse_err, same_inf ? 0.0 : std::fabs(lse[i] - ref.lse[i]));
  }
  if (std::isnan(lse_err)) lse_err = INFINITY;
  const double e_out = relative_error(out, ref.out), e_dq = relative_error(dq, ref_b.dq),
               e_dk = relative_error(dk, ref_b.dk), e_dv = relative_error(dv, ref_b.dv);

  std::printf("\n%s", print_program(prog).c_str());
  std::printf("  B=%d Hq=%d Hkv=%d S=%d D=%d, f32 host tensors\n", s.batch, s.heads_q, s.heads_kv,
              s.seq, s.head_dim);
  std::printf("  block mask: %lld full, %lld partial, %lld empty tiles, %zu bytes, %.2f ms\n",
              (long long)c.full, (long long)c.partial, (long long)c.empty, mask.bytes(), mask_ms);
  std::printf("  forward %.1f ms (first call), %.1f ms (again), backward %.1f ms\n", fwd_ms[0],
              fwd_ms[1], bwd_ms);
  std::printf("  out[0, 0, %d, 0..3] = %.4f %.4f %.4f %.4f, lse[0, 0, %d] = %.4f\n", s.seq - 1,
              out[(S - 1) * D], out[(S - 1) * D + 1], out[(S - 1) * D + 2], out[(S - 1) * D + 3],
              s.seq - 1, lse[S - 1]);
  std::printf("  vs fp64: out %.1e  dq %.1e  dk %.1e  dv %.1e (relative), lse %.1e (max abs)\n",
              e_out, e_dq, e_dk, e_dv, lse_err);
  const bool ok = e_out < kTolerance && e_dq < kTolerance && e_dk < kTolerance &&
                  e_dv < kTolerance && lse_err < kTolerance;
  std::printf("  %s\n", ok ? "OK" : "FAILED: error above 1e-4");
  return ok;
}

// Packed documents of random lengths, ids increasing along each sequence.
std::vector<int32_t> random_documents(int batch, int seq, std::mt19937_64& rng) {
  std::vector<int32_t> doc(size_t(batch) * seq);
  for (int b = 0; b < batch; ++b) {
    int id = -1, left = 0;
    for (int i = 0; i < seq; ++i) {
      if (left-- == 0) ++id, left = 100 + int(rng() % 400);
      doc[size_t(b) * seq + i] = id;
    }
  }
  return doc;
}

// Program 1, built with the embedded DSL: packed documents, causal, soft-capped scores.
bool document_softcap(const AttentionShape& s, std::mt19937_64& rng) {
  dsl::Buffer doc("doc", ElemType::I32, {"B", "S"});
  dsl::Param cap("cap", Type::F32);
  AttentionProgram prog = AttentionBuilder("app_doc_softcap")
                              .buffer(doc)
                              .param(cap)
                              .mask(stdlib::document(doc) && stdlib::causal())
                              .score(stdlib::softcap(cap))
                              .build();

  std::vector<int32_t> doc_ids = random_documents(s.batch, s.seq, rng);
  const float cap_value = 20.0f;
  Bindings bind{{"doc", TensorView::contiguous(doc_ids.data(), DType::I32, {s.batch, s.seq},
                                               TensorView::Where::Host, "doc")},
                {"cap", cap_value}};

  const int S = s.seq;
  testing::AttentionRefHooks ref{
      [&](int b, int, int q, int kv) {
        return doc_ids[b * S + q] == doc_ids[b * S + kv] && q >= kv;
      },
      [&](double x, int, int, int, int) { return cap_value * std::tanh(x / cap_value); },
      [&](double x, int, int, int, int) {
        double t = std::tanh(x / cap_value);
        return 1 - t * t;
      }};
  return run_attention(prog, bind, ref, s, rng);
}

// Program 2, from text (as an application would read it from its configuration): a sliding
// window with ALiBi slopes.
const char* kWindowAlibi = R"(attention app_window_alibi {
  buffer slopes : f32[H]
  param window : i32
  mask = q >= kv && q - kv < window
  score = score + slopes[h] * f32(kv - q)
}
)";

bool window_alibi(const AttentionShape& s, std::mt19937_64& rng) {
  AttentionProgram prog = parse_attention(kWindowAlibi, "app_window_alibi.tj");
  std::vector<float> slopes(s.heads_q);
  for (int h = 0; h < s.heads_q; ++h) slopes[h] = std::exp2(-8.0f * (h + 1) / s.heads_q);
  const int32_t window = 200;
  Bindings bind{{"slopes", host_f32(slopes, {s.heads_q}, "slopes")}, {"window", window}};

  testing::AttentionRefHooks ref{
      [&](int, int, int q, int kv) { return q >= kv && q - kv < window; },
      [&](double x, int, int h, int q, int kv) { return x + double(slopes[h]) * (kv - q); },
      {}};
  bool ok = run_attention(prog, bind, ref, s, rng);

  // A binding the program does not accept is a UserError naming the program and the value.
  Bindings wrong{{"slopes", host_f32(slopes, {s.heads_q}, "slopes")}, {"window", 200.5f}};
  try {
    analyse_block_mask(lower(prog), wrong, {.seq_q = s.seq, .seq_kv = s.seq});
    std::printf("  FAILED: an f32 bound to the i32 param 'window' was accepted\n");
    return false;
  } catch (const UserError& e) {
    std::printf("  a bad binding is refused: %s\n", e.what());
  }
  return ok;
}

// A loss head of two vocabulary segments with dead ids between them, soft-capped logits, label
// smoothing and z-loss; the [N, V] logits are never materialized. LinearCe.h takes device
// tensors; host tensors go to the CPU executor (runtime/cpu/CpuLinearCe.h) directly.
bool two_segment_loss(std::mt19937_64& rng) {
  dsl::Param cap("cap", Type::F32);
  LossProgram prog = LossBuilder("app_two_heads")
                         .param(cap)
                         .segment("base", 0, 3000, "W_base")
                         .segment("extra", 3100, 3612, "W_extra", "b_extra")
                         .logit(stdlib::softcap(cap, dsl::logit))
                         .label_smoothing(0.1)
                         .z_loss(1e-4)
                         .build();
  const int64_t n = 256, d = 64, v0 = 3000, v1 = 512;
  const float cap_value = 30.0f;
  std::vector<float> hidden = random_floats(n * d, rng, 0.5), w0 = random_floats(v0 * d, rng, 0.5),
                     w1 = random_floats(v1 * d, rng, 0.5), bias = random_floats(v1, rng);
  std::vector<int32_t> targets(n);
  for (int32_t& t : targets) {
    uint64_t r = rng() % 10;  // 10% ignored rows, the rest in either segment
    t = r == 0 ? -100 : r < 8 ? int32_t(rng() % v0) : int32_t(3100 + rng() % v1);
  }

  auto hooks = make_row_hooks(lower(prog), Bindings{{"cap", cap_value}});
  CpuLinearCeInputs in{
      .hidden = host_f32(hidden, {n, d}, "hidden"),
      .targets = TensorView::contiguous(targets.data(), DType::I32, {n}, TensorView::Where::Host,
                                        "targets"),
      .weights = {host_f32(w0, {v0, d}, "W_base"), host_f32(w1, {v1, d}, "W_extra")},
      .biases = {TensorView{}, host_f32(bias, {v1}, "b_extra")}};
  std::vector<float> lse(n, NAN), row_loss(n, NAN), dh(n * d, NAN), dw0(w0.size(), NAN),
      dw1(w1.size(), NAN), db(v1, NAN);
  CpuLinearCeForwardOutputs fwd{.lse = host_f32(lse, {n}, "lse"),
                                .row_loss = host_f32(row_loss, {n}, "row_loss")};
  auto t0 = Clock::now();
  const double loss = cpu_linear_ce_forward(*hooks, prog, in, fwd);
  const double fwd_ms = ms_since(t0);
  CpuLinearCeBackwardArgs bwd{
      .lse = fwd.lse,
      .d_hidden = host_f32(dh, {n, d}, "d_hidden"),
      .d_weights = {host_f32(dw0, {v0, d}, "d_W_base"), host_f32(dw1, {v1, d}, "d_W_extra")},
      .d_biases = {TensorView{}, host_f32(db, {v1}, "d_b_extra")}};
  t0 = Clock::now();
  cpu_linear_ce_backward(*hooks, prog, in, bwd);
  const double bwd_ms = ms_since(t0);

  testing::RefLinearCe p;
  p.n_rows = n;
  p.dim = d;
  p.hidden = hidden.data();
  p.targets = targets.data();
  p.segments = {{0, v0, w0.data(), nullptr}, {3100, v1, w1.data(), bias.data()}};
  p.label_smoothing = 0.1;
  p.z_loss = 1e-4;
  p.logit_mod = [&](double x, int64_t, int64_t) { return cap_value * std::tanh(x / cap_value); };
  p.logit_grad = [&](double x, int64_t, int64_t) {
    double t = std::tanh(x / cap_value);
    return 1 - t * t;
  };
  testing::RefLinearCeResult ref = testing::reference_linear_ce(p);
  const double e_loss = std::fabs(loss - ref.loss) / std::fabs(ref.loss),
               e_rows = relative_error(row_loss, ref.row_loss),
               e_dh = relative_error(dh, ref.d_hidden),
               e_dw0 = relative_error(dw0, ref.d_weight[0]),
               e_dw1 = relative_error(dw1, ref.d_weight[1]),
               e_db = relative_error(db, ref.d_bias[1]);

  std::printf("\n%s", print_program(prog).c_str());
  std::printf("  N=%lld D=%lld, 10%% ignored rows, f32 host tensors, hooks: %s\n", (long long)n,
              (long long)d, std::string(hooks->backend()).c_str());
  std::printf("  loss %.6f (fp64 %.6f), forward %.1f ms, backward %.1f ms\n", loss, ref.loss,
              fwd_ms, bwd_ms);
  std::printf(
      "  vs fp64 (relative): loss %.1e  row_loss %.1e  dE %.1e  dW_base %.1e  "
      "dW_extra %.1e  db_extra %.1e\n",
      e_loss, e_rows, e_dh, e_dw0, e_dw1, e_db);
  const bool ok = e_loss < kTolerance && e_rows < kTolerance && e_dh < kTolerance &&
                  e_dw0 < kTolerance && e_dw1 < kTolerance && e_db < kTolerance;
  std::printf("  %s\n", ok ? "OK" : "FAILED: error above 1e-4");
  return ok;
}

}  // namespace

int main() {
  try {
    std::mt19937_64 rng(std::random_device{}());
    AttentionShape shape;
    bool ok = document_softcap(shape, rng);
    ok &= window_alibi(shape, rng);
    ok &= two_segment_loss(rng);
    std::printf("\n%s\n", ok ? "all results match the fp64 references" : "FAILED");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "embed_host_app: %s\n", e.what());
    return 1;
  }
}
