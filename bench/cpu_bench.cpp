// CPU backend benchmarks: JIT compile time of each example program's hooks (LLVM builds), and
// the CPU executors against a straightforward loop (the fp64 brute-force references of
// tests/support): attention forward/backward (causal and soft-capped causal, B=1, H=4, D=64)
// and fused linear cross-entropy forward/backward (N=512, D=256, V=8192). Hooks run on the
// build's default backend; "/interp" variants force the IR interpreter.
#include <benchmark/benchmark.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "compiler/Lower.h"
#include "runtime/Bindings.h"
#include "dsl/TextForm.h"
#include "runtime/cpu/CpuAttention.h"
#include "runtime/cpu/CpuLinearCe.h"
#include "tests/support/AttentionReference.h"
#include "tests/support/LinearCeReference.h"
#ifdef TILEJIT_HAVE_LLVM
#include "runtime/cpu/LlvmHooks.h"
#endif

namespace {

using namespace tilejit;
constexpr auto kHost = TensorView::Where::Host;

std::vector<float> random_floats(size_t n, uint64_t seed, float amp = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

#ifdef TILEJIT_HAVE_LLVM
// Bindings of one zero element per buffer: compiling needs only the program.
Bindings zero_bindings(const std::vector<BufferDecl>& buffers, const std::vector<ParamDecl>& params) {
  alignas(8) static uint64_t zeros[4] = {};
  Bindings bind;
  for (const BufferDecl& b : buffers)
    bind.buffer(b.name, TensorView::contiguous(zeros, dtype_of(b.elem),
                                               std::vector<int64_t>(b.dims.size(), 1), kHost, b.name));
  for (const ParamDecl& p : params) {
    if (p.type == Type::I32) bind.param(p.name, int32_t{1});
    else bind.param(p.name, 1.0f);
  }
  return bind;
}

// Code generation, O3 and JIT of one program's hooks (lowering excluded).
void BM_JitCompile(benchmark::State& state, std::string path) {
  ParsedProgram program = load_program(path);
  if (auto* a = std::get_if<AttentionProgram>(&program)) {
    LoweredAttention p = lower(*a);
    Bindings bind = zero_bindings(p.program.buffers, p.program.params);
    for (auto _ : state) {
      clear_llvm_hook_cache();
      benchmark::DoNotOptimize(make_row_hooks(p, bind, HookBackend::Llvm));
    }
  } else {
    LoweredLoss p = lower(std::get<LossProgram>(program));
    Bindings bind = zero_bindings(p.program.buffers, p.program.params);
    for (auto _ : state) {
      clear_llvm_hook_cache();
      benchmark::DoNotOptimize(make_row_hooks(p, bind, HookBackend::Llvm));
    }
  }
}
#endif

const char* kCausal = "attention causal {\n mask = q >= kv\n}\n";
const char* kSoftcap =
    "attention softcap_causal {\n param cap : f32\n mask = q >= kv\n score = cap * tanh(score / cap)\n}\n";

struct AttentionSetup {
  int heads = 4, seq, dim = 64;
  LoweredAttention program;
  Bindings bind;
  BlockMask mask;
  std::vector<float> q, k, v, out, lse, d_out, dq, dk, dv;

  AttentionSetup(const char* text, int seq_len) : seq(seq_len) {
    program = lower(parse_attention(text));
    if (!program.program.params.empty()) bind.param("cap", 20.0f);
    BlockMaskShape shape{1, 1, seq, seq, 128, 64};
    mask = BlockMask::from_classifier(shape, [&](int, int, int qt, int kt) {
      int q0 = qt * 128, q1 = std::min(seq, q0 + 128) - 1, k0 = kt * 64, k1 = std::min(seq, k0 + 64) - 1;
      return k0 > q1 ? TileClass::Empty : k1 <= q0 ? TileClass::Full : TileClass::Partial;
    });
    size_t n = static_cast<size_t>(heads) * seq * dim;
    q = random_floats(n, 1);
    k = random_floats(n, 2);
    v = random_floats(n, 3);
    d_out = random_floats(n, 4);
    out.assign(n, 0);
    dq.assign(n, 0);
    dk.assign(n, 0);
    dv.assign(n, 0);
    lse.assign(static_cast<size_t>(heads) * seq, 0);
  }
  TensorView t(std::vector<float>& data, const char* name) {
    return TensorView::contiguous(data.data(), DType::F32, {1, heads, seq, dim}, kHost, name);
  }
  TensorView lse_view() { return TensorView::contiguous(lse.data(), DType::F32, {1, heads, seq}, kHost, "lse"); }
  CpuAttentionForwardArgs forward_args() {
    return {.q = t(q, "q"), .k = t(k, "k"), .v = t(v, "v"), .out = t(out, "out"), .lse = lse_view()};
  }
  CpuAttentionBackwardArgs backward_args() {
    return {.q = t(q, "q"), .k = t(k, "k"), .v = t(v, "v"), .out = t(out, "out"), .lse = lse_view(),
            .d_out = t(d_out, "d_out"), .d_q = t(dq, "dq"), .d_k = t(dk, "dk"), .d_v = t(dv, "dv")};
  }
  // Causal attention FLOPs: QK^T and PV over the unmasked half.
  double forward_flops() const { return 2.0 * 2 * heads * dim * (static_cast<double>(seq) * (seq + 1) / 2); }
};

void BM_AttentionForward(benchmark::State& state, const char* text, HookBackend backend) {
  AttentionSetup s(text, static_cast<int>(state.range(0)));
  auto hooks = make_row_hooks(s.program, s.bind, backend);
  for (auto _ : state) cpu_attention_forward(*hooks, s.mask, s.forward_args());
  state.counters["GFLOP/s"] = benchmark::Counter(s.forward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionBackward(benchmark::State& state, const char* text, HookBackend backend) {
  AttentionSetup s(text, static_cast<int>(state.range(0)));
  auto hooks = make_row_hooks(s.program, s.bind, backend);
  cpu_attention_forward(*hooks, s.mask, s.forward_args());
  for (auto _ : state) cpu_attention_backward(*hooks, s.mask, s.backward_args());
  state.counters["GFLOP/s"] = benchmark::Counter(2.5 * s.forward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

testing::AttentionRefShape ref_shape(const AttentionSetup& s) {
  return {1, s.heads, s.heads, s.seq, s.seq, s.dim, 1.0 / std::sqrt(s.dim)};
}
testing::AttentionRefHooks causal_hooks() {
  testing::AttentionRefHooks h;
  h.mask = [](int, int, int q, int kv) { return q >= kv; };
  return h;
}

void BM_AttentionForwardReferenceLoop(benchmark::State& state) {
  AttentionSetup s(kCausal, static_cast<int>(state.range(0)));
  std::vector<double> q(s.q.begin(), s.q.end()), k(s.k.begin(), s.k.end()), v(s.v.begin(), s.v.end());
  for (auto _ : state) benchmark::DoNotOptimize(testing::attention_forward_reference(ref_shape(s), causal_hooks(), q, k, v));
  state.counters["GFLOP/s"] = benchmark::Counter(s.forward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_AttentionBackwardReferenceLoop(benchmark::State& state) {
  AttentionSetup s(kCausal, static_cast<int>(state.range(0)));
  std::vector<double> q(s.q.begin(), s.q.end()), k(s.k.begin(), s.k.end()), v(s.v.begin(), s.v.end()),
      g(s.d_out.begin(), s.d_out.end());
  for (auto _ : state)
    benchmark::DoNotOptimize(testing::attention_backward_reference(ref_shape(s), causal_hooks(), q, k, v, g));
  state.counters["GFLOP/s"] = benchmark::Counter(2.5 * s.forward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

const char* kLoss =
    "loss softcap_lm {\n param cap : f32\n segment vocab : [0, 8192) weight W\n"
    " logit = cap * tanh(logit / cap)\n label_smoothing = 0.1\n}\n";

struct LossSetup {
  int64_t rows = 512, dim = 256, vocab = 8192;
  LoweredLoss program = lower(parse_loss(kLoss));
  Bindings bind{{"cap", 30.0f}};
  std::vector<float> e = random_floats(rows * dim, 5), w = random_floats(vocab * dim, 6, 0.1f);
  std::vector<int32_t> targets;
  std::vector<float> lse = std::vector<float>(rows), loss = lse, de = std::vector<float>(rows * dim),
                     dw = std::vector<float>(vocab * dim);
  LossSetup() {
    for (int64_t r = 0; r < rows; ++r) targets.push_back(static_cast<int32_t>((r * 7919) % vocab));
  }
  CpuLinearCeInputs inputs() {
    return {TensorView::contiguous(e.data(), DType::F32, {rows, dim}, kHost, "hidden"),
            TensorView::contiguous(targets.data(), DType::I32, {rows}, kHost, "targets"),
            {TensorView::contiguous(w.data(), DType::F32, {vocab, dim}, kHost, "W")},
            {}};
  }
  TensorView rows_view(std::vector<float>& v, const char* name) {
    return TensorView::contiguous(v.data(), DType::F32, {rows}, kHost, name);
  }
  double flops() const { return 2.0 * rows * dim * vocab; }
};

void BM_LinearCeForward(benchmark::State& state, HookBackend backend) {
  LossSetup s;
  auto hooks = make_row_hooks(s.program, s.bind, backend);
  for (auto _ : state)
    benchmark::DoNotOptimize(cpu_linear_ce_forward(*hooks, s.program.program, s.inputs(),
                                                   {s.rows_view(s.lse, "lse"), s.rows_view(s.loss, "loss"), {}}));
  state.counters["GFLOP/s"] = benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LinearCeBackward(benchmark::State& state, HookBackend backend) {
  LossSetup s;
  auto hooks = make_row_hooks(s.program, s.bind, backend);
  cpu_linear_ce_forward(*hooks, s.program.program, s.inputs(), {s.rows_view(s.lse, "lse"), s.rows_view(s.loss, "loss"), {}});
  CpuLinearCeBackwardArgs args{s.rows_view(s.lse, "lse"), 1.0f, {},
                               TensorView::contiguous(s.de.data(), DType::F32, {s.rows, s.dim}, kHost, "dE"),
                               {TensorView::contiguous(s.dw.data(), DType::F32, {s.vocab, s.dim}, kHost, "dW")},
                               {}};
  for (auto _ : state) cpu_linear_ce_backward(*hooks, s.program.program, s.inputs(), args);
  state.counters["GFLOP/s"] = benchmark::Counter(3 * s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LinearCeReferenceLoop(benchmark::State& state) {
  LossSetup s;
  testing::RefLinearCe ref;
  ref.n_rows = s.rows;
  ref.dim = s.dim;
  ref.hidden = s.e.data();
  ref.targets = s.targets.data();
  ref.segments = {{0, s.vocab, s.w.data(), nullptr}};
  ref.label_smoothing = 0.1;
  ref.logit_mod = [](double x, int64_t, int64_t) { return 30 * std::tanh(x / 30); };
  ref.logit_grad = [](double x, int64_t, int64_t) { double t = std::tanh(x / 30); return 1 - t * t; };
  for (auto _ : state) benchmark::DoNotOptimize(testing::reference_linear_ce(ref));
  state.counters["GFLOP/s"] = benchmark::Counter(3 * s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  using benchmark::RegisterBenchmark;
#ifdef TILEJIT_HAVE_LLVM
  for (const auto& entry : std::filesystem::directory_iterator(TILEJIT_EXAMPLES_DIR))
    if (entry.path().extension() == ".tj")
      RegisterBenchmark(("BM_JitCompile/" + entry.path().stem().string()).c_str(), BM_JitCompile,
                        entry.path().string())
          ->Unit(benchmark::kMillisecond);
#endif
  for (int seq : {1024, 2048}) {
    RegisterBenchmark("BM_AttentionForward/causal", BM_AttentionForward, kCausal, HookBackend::Auto)->Arg(seq)->Unit(benchmark::kMillisecond)->UseRealTime();
    RegisterBenchmark("BM_AttentionForward/softcap", BM_AttentionForward, kSoftcap, HookBackend::Auto)->Arg(seq)->Unit(benchmark::kMillisecond)->UseRealTime();
    RegisterBenchmark("BM_AttentionBackward/causal", BM_AttentionBackward, kCausal, HookBackend::Auto)->Arg(seq)->Unit(benchmark::kMillisecond)->UseRealTime();
    RegisterBenchmark("BM_AttentionBackward/softcap", BM_AttentionBackward, kSoftcap, HookBackend::Auto)->Arg(seq)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  RegisterBenchmark("BM_AttentionForward/softcap/interp", BM_AttentionForward, kSoftcap, HookBackend::Interpreter)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
  RegisterBenchmark("BM_AttentionForwardReferenceLoop/causal", BM_AttentionForwardReferenceLoop)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
  RegisterBenchmark("BM_AttentionBackwardReferenceLoop/causal", BM_AttentionBackwardReferenceLoop)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
  RegisterBenchmark("BM_LinearCeForward/softcap", BM_LinearCeForward, HookBackend::Auto)->Unit(benchmark::kMillisecond)->UseRealTime();
  RegisterBenchmark("BM_LinearCeForward/softcap/interp", BM_LinearCeForward, HookBackend::Interpreter)->Unit(benchmark::kMillisecond)->UseRealTime();
  RegisterBenchmark("BM_LinearCeBackward/softcap", BM_LinearCeBackward, HookBackend::Auto)->Unit(benchmark::kMillisecond)->UseRealTime();
  RegisterBenchmark("BM_LinearCeReferenceLoop/softcap", BM_LinearCeReferenceLoop)->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
