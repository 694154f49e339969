// `tilejit demo` on the CPU backend (runtime/cpu/): the same API calls with host tensors.
#include <chrono>
#include <cmath>
#include <cstring>

#include "compiler/Lower.h"
#include "runtime/Attention.h"
#include "runtime/cpu/CpuLinearCe.h"
#include "runtime/cpu/RowHooks.h"
#include "tools/DemoDevice.h"

namespace tilejit::cli {

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

HostTensor HostTensor::random_bf16(std::string name, std::vector<int64_t> shape,
                                   std::mt19937_64& rng, double stddev) {
  HostTensor t{std::move(name), std::move(shape), {}, {}};
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::normal_distribution<float> normal(0.0f, float(stddev));
  t.bits.resize(n);
  t.values.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    t.bits[i] = float_to_bf16(normal(rng));
    t.values[i] = bf16_to_float(t.bits[i]);
  }
  return t;
}

TensorView HostTensor::view() {
  return TensorView::contiguous(bits.data(), DType::BF16, shape, TensorView::Where::Host, name);
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<double> to_doubles(const HostTensor& t) {
  std::vector<double> out(t.bits.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(t.bits[i]);
  return out;
}

TensorView f32_view(std::vector<float>& v, std::vector<int64_t> shape, const char* name) {
  return TensorView::contiguous(v.data(), DType::F32, std::move(shape), TensorView::Where::Host,
                                name);
}

class CpuDemoDevice : public DemoDevice {
 public:
  std::string name() const override {
    return std::string("CPU (hooks: ") + (have_llvm_hooks() ? "LLVM JIT" : "interpreter") + ")";
  }

  DemoAttentionOutputs attention(const AttentionProgram& prog, const Bindings& bind,
                                 const BlockMask& mask, HostTensor& q, HostTensor& k,
                                 HostTensor& v, HostTensor& d_out) override {
    std::vector<int64_t> lse_shape(q.shape.begin(), q.shape.end() - 1);
    // Outputs in the inputs' dtype (bf16), poisoned with NaN bits first.
    auto output = [](const HostTensor& like, const char* name) {
      HostTensor t{name, like.shape, std::vector<uint16_t>(like.bits.size(), 0x7fc1), {}};
      return t;
    };
    HostTensor out = output(q, "out"), dq = output(q, "dq"), dk = output(k, "dk"),
               dv = output(v, "dv");
    std::vector<float> lse(q.values.size() / q.shape.back(), NAN);
    TensorView lse_v = f32_view(lse, lse_shape, "lse");
    DemoAttentionOutputs r;
    auto t0 = Clock::now();
    attention_forward(prog, q.view(), k.view(), v.view(), bind, mask, {}, nullptr, out.view(),
                      lse_v);
    r.fwd_ms = ms_since(t0);
    t0 = Clock::now();
    attention_backward(prog, q.view(), k.view(), v.view(), out.view(), lse_v, d_out.view(), bind,
                       mask, {}, nullptr, dq.view(), dk.view(), dv.view());
    r.bwd_ms = ms_since(t0);
    r.out = to_doubles(out), r.lse = widen(lse), r.dq = to_doubles(dq), r.dk = to_doubles(dk);
    r.dv = to_doubles(dv);
    return r;
  }

  DemoLossOutputs loss(const LossProgram& prog, float cap, HostTensor& hidden, HostTensor& w0,
                       HostTensor& w1, std::vector<float>& bias,
                       std::vector<int32_t>& targets) override {
    const int64_t n = hidden.shape[0], d = hidden.shape[1];
    auto hooks = make_row_hooks(lower(prog), Bindings{{"cap", cap}}, HookBackend::Auto);
    CpuLinearCeInputs in;
    in.hidden = hidden.view();
    in.targets = TensorView::contiguous(targets.data(), DType::I32, {n}, TensorView::Where::Host,
                                        "targets");
    in.weights = {w0.view(), w1.view()};
    in.biases = {TensorView{}, f32_view(bias, {int64_t(bias.size())}, "b_extra")};
    std::vector<float> lse(n), row_loss(n), dh(n * d), dw0(w0.values.size()),
        dw1(w1.values.size()), db(bias.size());
    CpuLinearCeForwardOutputs fo{f32_view(lse, {n}, "lse"), f32_view(row_loss, {n}, "row_loss"),
                                 TensorView{}};
    DemoLossOutputs r;
    auto t0 = Clock::now();
    r.loss = cpu_linear_ce_forward(*hooks, prog, in, fo);
    r.fwd_ms = ms_since(t0);
    CpuLinearCeBackwardArgs ba;
    ba.lse = fo.lse;
    ba.d_hidden = f32_view(dh, {n, d}, "d_hidden");
    ba.d_weights = {f32_view(dw0, w0.shape, "d_W_base"), f32_view(dw1, w1.shape, "d_W_extra")};
    ba.d_biases = {TensorView{}, f32_view(db, {int64_t(db.size())}, "d_b_extra")};
    t0 = Clock::now();
    cpu_linear_ce_backward(*hooks, prog, in, ba);
    r.bwd_ms = ms_since(t0);
    r.d_hidden = widen(dh), r.d_weight0 = widen(dw0), r.d_weight1 = widen(dw1);
    return r;
  }
};

}  // namespace

std::unique_ptr<DemoDevice> make_cpu_demo_device() { return std::make_unique<CpuDemoDevice>(); }

}  // namespace tilejit::cli
