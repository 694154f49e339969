// The run half of `tilejit demo`: one attention program (document mask + causal + soft-cap,
// GQA) forward and backward, and one two-segment loss with a dead gap, on the GPU when there is
// one, else on the CPU backend. Each result is checked against the fp64 reference.
#include "tools/DemoRun.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "compiler/Interpreter.h"
#include "compiler/Printer.h"
#include "compiler/Lower.h"
#include "dsl/Builders.h"
#include "dsl/Stdlib.h"
#include "runtime/Attention.h"
#include "runtime/MaskAnalysis.h"
#include "runtime/cpu/CpuLinearCe.h"
#include "runtime/cpu/RowHooks.h"
#include "tests/support/AttentionReference.h"
#include "tests/support/LinearCeReference.h"
#include "tools/DemoDevice.h"

namespace tilejit::cli {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// ‖a − b‖ / ‖b‖ over the elements.
double relative_error(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double d = got[i] - ref[i];
    if (std::isnan(got[i])) return INFINITY;
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

struct AttentionDemo {
  int batch = 2, heads_q = 8, heads_kv = 2, seq = 700, head_dim = 64;
};

AttentionProgram demo_attention_program() { return stdlib::standard_attention_program("doc_softcap"); }

int run_attention(DemoDevice& dev, const AttentionDemo& s) {
  const AttentionProgram prog = demo_attention_program();
  const LoweredAttention lowered = lower(prog);
  std::mt19937_64 rng(std::random_device{}());
  std::normal_distribution<double> normal(0.0, 1.0);

  // Packed documents of random lengths per batch entry.
  std::vector<int32_t> doc(s.batch * s.seq);
  for (int b = 0; b < s.batch; ++b) {
    int id = 0, left = 0;
    for (int i = 0; i < s.seq; ++i) {
      if (left-- == 0) { ++id; left = 50 + static_cast<int>(rng() % 250); }
      doc[b * s.seq + i] = id;
    }
  }
  const float cap = 30.0f;
  Bindings host_bind{{"doc", TensorView::contiguous(doc.data(), DType::I32, {s.batch, s.seq},
                                                    TensorView::Where::Host, "doc")},
                     {"cap", cap}};

  const int64_t nq = int64_t(s.batch) * s.heads_q * s.seq * s.head_dim;
  const int64_t nk = int64_t(s.batch) * s.heads_kv * s.seq * s.head_dim;
  HostTensor q = HostTensor::random_bf16("q", {s.batch, s.heads_q, s.seq, s.head_dim}, rng);
  HostTensor k = HostTensor::random_bf16("k", {s.batch, s.heads_kv, s.seq, s.head_dim}, rng);
  HostTensor v = HostTensor::random_bf16("v", {s.batch, s.heads_kv, s.seq, s.head_dim}, rng);
  HostTensor dout = HostTensor::random_bf16("d_out", {s.batch, s.heads_q, s.seq, s.head_dim}, rng);

  auto t0 = Clock::now();
  BlockMask mask = analyse_block_mask(lowered, host_bind,
                                      {.batch = s.batch, .heads = s.heads_q, .seq_q = s.seq,
                                       .seq_kv = s.seq, .block_q = 128, .block_kv = 64});
  double mask_ms = ms_since(t0);
  BlockMask::Counts c = mask.counts();

  DemoAttentionOutputs got = dev.attention(prog, host_bind, mask, q, k, v, dout);

  // The fp64 reference, with the program's hooks evaluated by the interpreter.
  EvalContext ctx = host_eval_context(prog, host_bind);
  CompiledEval mask_eval(lowered.program.mask, ctx), score_eval(lowered.program.score, ctx),
      grad_eval(lowered.score_grad, ctx);
  testing::AttentionRefHooks hooks{
      [&](int b, int h, int qi, int kv) { return mask_eval.eval_mask(b, h, qi, kv); },
      [&](double sc, int b, int h, int qi, int kv) { return score_eval.eval_score(sc, b, h, qi, kv); },
      [&](double sc, int b, int h, int qi, int kv) { return grad_eval.eval_score(sc, b, h, qi, kv); }};
  testing::AttentionRefShape shape{s.batch, s.heads_q, s.heads_kv, s.seq, s.seq, s.head_dim,
                                   1.0 / std::sqrt(double(s.head_dim))};
  t0 = Clock::now();
  auto ref = testing::attention_forward_reference(shape, hooks, q.values, k.values, v.values);
  auto ref_b = testing::attention_backward_reference(shape, hooks, q.values, k.values, v.values,
                                                     dout.values);
  double ref_ms = ms_since(t0);

  double e_out = relative_error(got.out, ref.out), e_dq = relative_error(got.dq, ref_b.dq),
         e_dk = relative_error(got.dk, ref_b.dk), e_dv = relative_error(got.dv, ref_b.dv);
  double lse_err = 0;
  for (size_t i = 0; i < ref.lse.size(); ++i)
    if (std::isfinite(ref.lse[i])) lse_err = std::max(lse_err, std::fabs(got.lse[i] - ref.lse[i]));
  (void)nq; (void)nk;

  std::printf("\n2. Attention on the %s: %s\n", dev.name().c_str(), print_expr(prog.mask).c_str());
  std::printf("   score = %s; B=%d Hq=%d Hkv=%d S=%d D=%d, bf16\n", print_expr(prog.score).c_str(),
              s.batch, s.heads_q, s.heads_kv, s.seq, s.head_dim);
  std::printf("   block mask (analysed, no element evaluated): %lld full, %lld partial, %lld empty "
              "tiles, %zu bytes, %.2f ms\n",
              (long long)c.full, (long long)c.partial, (long long)c.empty, mask.bytes(), mask_ms);
  std::printf("   forward %.2f ms, backward %.2f ms  (fp64 reference: %.0f ms)\n", got.fwd_ms,
              got.bwd_ms, ref_ms);
  std::printf("   relative error vs fp64: out %.2e  dq %.2e  dk %.2e  dv %.2e; max |lse err| %.2e\n",
              e_out, e_dq, e_dk, e_dv, lse_err);
  bool ok = e_out < 1e-2 && e_dq < 1e-2 && e_dk < 1e-2 && e_dv < 1e-2 && lse_err < 1e-2;
  std::printf("   %s\n", ok ? "OK" : "FAILED: error above 1e-2");
  return ok ? 0 : 1;
}

LossProgram demo_loss_program() {
  dsl::Param cap("cap", Type::F32);
  return LossBuilder("two_segments_softcap")
      .param(cap)
      .segment("base", 0, 6000, "W_base")
      .segment("extra", 6130, 7154, "W_extra", "b_extra")
      .logit(stdlib::softcap(cap, dsl::logit))
      .label_smoothing(0.05)
      .z_loss(1e-4)
      .build();
}

int run_loss(DemoDevice& dev) {
  const LossProgram prog = demo_loss_program();
  const int64_t n = 384, d = 128;
  std::mt19937_64 rng(std::random_device{}());
  HostTensor hidden = HostTensor::random_bf16("hidden", {n, d}, rng, 0.5);
  HostTensor w0 = HostTensor::random_bf16("W_base", {6000, d}, rng, 0.5);
  HostTensor w1 = HostTensor::random_bf16("W_extra", {1024, d}, rng, 0.5);
  // The bias in bf16 like the weights (the GPU path takes E's dtype), held as exact floats.
  HostTensor bias16 = HostTensor::random_bf16("b_extra", {1024}, rng, 1.0);
  std::vector<float> bias(bias16.values.begin(), bias16.values.end());
  std::vector<int32_t> targets(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t r = rng() % 10;
    targets[i] = r == 0 ? -100 : (r < 8 ? int32_t(rng() % 6000) : int32_t(6130 + rng() % 1024));
  }
  const float cap = 30.0f;
  DemoLossOutputs got = dev.loss(prog, cap, hidden, w0, w1, bias, targets);

  std::vector<float> h32(hidden.values.begin(), hidden.values.end()),
      w0f(w0.values.begin(), w0.values.end()), w1f(w1.values.begin(), w1.values.end());
  testing::RefLinearCe p;
  p.n_rows = n;
  p.dim = d;
  p.hidden = h32.data();
  p.targets = targets.data();
  p.segments = {{0, 6000, w0f.data(), nullptr}, {6130, 1024, w1f.data(), bias.data()}};
  p.label_smoothing = 0.05;
  p.z_loss = 1e-4;
  p.logit_mod = [&](double x, int64_t, int64_t) { return cap * std::tanh(x / cap); };
  p.logit_grad = [&](double x, int64_t, int64_t) {
    double t = std::tanh(x / cap);
    return 1 - t * t;
  };
  auto t0 = Clock::now();
  testing::RefLinearCeResult ref = testing::reference_linear_ce(p);
  double ref_ms = ms_since(t0);

  double e_de = relative_error(got.d_hidden, ref.d_hidden);
  double e_dw0 = relative_error(got.d_weight0, ref.d_weight[0]);
  double e_dw1 = relative_error(got.d_weight1, ref.d_weight[1]);
  double e_loss = std::fabs(got.loss - ref.loss) / std::max(1e-30, std::fabs(ref.loss));
  std::printf("\n3. Fused linear cross-entropy on the %s: two segments [0, 6000) + dead "
              "[6000, 6130) + [6130, 7154) with bias,\n   soft-cap 30, smoothing 0.05, z-loss 1e-4, "
              "N=%lld D=%lld, 10%% ignored rows, bf16; logits never materialized\n",
              dev.name().c_str(), (long long)n, (long long)d);
  std::printf("   loss %.6f (fp64 reference %.6f), forward %.2f ms, backward %.2f ms "
              "(reference %.0f ms)\n",
              got.loss, ref.loss, got.fwd_ms, got.bwd_ms, ref_ms);
  std::printf("   relative error vs fp64: loss %.2e  dE %.2e  dW_base %.2e  dW_extra %.2e\n",
              e_loss, e_de, e_dw0, e_dw1);
  bool ok = e_loss < 1e-2 && e_de < 1e-2 && e_dw0 < 1e-2 && e_dw1 < 1e-2;
  std::printf("   %s\n", ok ? "OK" : "FAILED: error above 1e-2");
  return ok ? 0 : 1;
}

}  // namespace

int run_demo_workloads(bool gpu, bool quick) {
  std::unique_ptr<DemoDevice> dev = gpu ? make_gpu_demo_device() : make_cpu_demo_device();
  AttentionDemo shape;
  if (quick) shape.seq = 300;
  int rc = run_attention(*dev, shape);
  rc |= run_loss(*dev);
  return rc;
}

}  // namespace tilejit::cli
