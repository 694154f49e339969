// `tilejit demo` on the GPU: the JIT kernels through the public API, device tensors, stream 0.
#include <cmath>
#include <cstring>

#include "runtime/Attention.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/LinearCe.h"
#include "tools/DemoDevice.h"

namespace tilejit::cli {

namespace {

// Times device work with events on the default stream.
class EventTimer {
 public:
  explicit EventTimer(Driver& d) : d_(d), start_(d.event_create()), stop_(d.event_create()) {
    d_.event_record(start_, nullptr);
  }
  ~EventTimer() {
    d_.event_destroy(start_);
    d_.event_destroy(stop_);
  }
  double stop_ms() {
    d_.event_record(stop_, nullptr);
    d_.stream_synchronize(nullptr);
    return d_.event_elapsed_ms(start_, stop_);
  }

 private:
  Driver& d_;
  CUevent start_, stop_;
};

struct DeviceTensor {
  DeviceBuffer buffer;
  TensorView view;

  static DeviceTensor of(DType dtype, std::vector<int64_t> shape, std::string name) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    DeviceTensor t{DeviceBuffer(std::max<size_t>(1, n * dtype_size(dtype))), {}};
    t.buffer.fill_bytes(0xFF);  // poison: NaN for floats, so unwritten outputs show
    t.view = TensorView::contiguous(t.buffer.data(), dtype, std::move(shape),
                                    TensorView::Where::Device, std::move(name));
    return t;
  }
  template <typename T>
  static DeviceTensor from(const std::vector<T>& host, DType dtype, std::vector<int64_t> shape,
                           std::string name) {
    DeviceTensor t = of(dtype, std::move(shape), std::move(name));
    t.buffer.copy_from_host(host.data(), host.size() * sizeof(T));
    return t;
  }
  std::vector<double> to_doubles() const {
    std::vector<double> out(view.numel());
    if (view.dtype == DType::BF16) {
      std::vector<uint16_t> bits(out.size());
      buffer.copy_to_host(bits.data(), bits.size() * 2);
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(bits[i]);
    } else {
      std::vector<float> f(out.size());
      buffer.copy_to_host(f.data(), f.size() * 4);
      for (size_t i = 0; i < out.size(); ++i) out[i] = f[i];
    }
    return out;
  }
};

std::vector<double> view_to_doubles(const TensorView& v) {
  std::vector<float> f(v.numel());
  Driver::get()->memcpy_dtoh(f.data(), v.device_ptr(), f.size() * 4);
  return {f.begin(), f.end()};
}

class GpuDemoDevice : public DemoDevice {
 public:
  GpuDemoDevice() : driver_(*Driver::get()) {
    driver_.ensure_context();
  }
  std::string name() const override { return "GPU (" + device_arch(0) + ")"; }

  DemoAttentionOutputs attention(const AttentionProgram& prog, const Bindings& host_bind,
                                 const BlockMask& mask, HostTensor& q, HostTensor& k,
                                 HostTensor& v, HostTensor& d_out) override {
    const TensorView& doc = *host_bind.find_buffer("doc");
    std::vector<int32_t> doc_host(static_cast<const int32_t*>(doc.data),
                                  static_cast<const int32_t*>(doc.data) + doc.numel());
    DeviceTensor doc_d = DeviceTensor::from(doc_host, DType::I32, doc.shape, "doc");
    Bindings bind = host_bind;
    bind.buffer("doc", doc_d.view);
    auto dq_ = DeviceTensor::from(q.bits, DType::BF16, q.shape, "q");
    auto dk_ = DeviceTensor::from(k.bits, DType::BF16, k.shape, "k");
    auto dv_ = DeviceTensor::from(v.bits, DType::BF16, v.shape, "v");
    auto ddo = DeviceTensor::from(d_out.bits, DType::BF16, d_out.shape, "d_out");
    std::vector<int64_t> lse_shape(q.shape.begin(), q.shape.end() - 1);
    auto out = DeviceTensor::of(DType::BF16, q.shape, "out");
    auto lse = DeviceTensor::of(DType::F32, lse_shape, "lse");
    auto gq = DeviceTensor::of(DType::BF16, q.shape, "dq");
    auto gk = DeviceTensor::of(DType::BF16, k.shape, "dk");
    auto gv = DeviceTensor::of(DType::BF16, v.shape, "dv");
    // First calls compile (or load from the cache); time the second.
    DemoAttentionOutputs r;
    for (int pass = 0; pass < 2; ++pass) {
      EventTimer t(driver_);
      attention_forward(prog, dq_.view, dk_.view, dv_.view, bind, mask, {}, nullptr, out.view,
                        lse.view);
      r.fwd_ms = t.stop_ms();
      EventTimer tb(driver_);
      attention_backward(prog, dq_.view, dk_.view, dv_.view, out.view, lse.view, ddo.view, bind,
                         mask, {}, nullptr, gq.view, gk.view, gv.view);
      r.bwd_ms = tb.stop_ms();
    }
    r.out = out.to_doubles(), r.lse = lse.to_doubles(), r.dq = gq.to_doubles();
    r.dk = gk.to_doubles(), r.dv = gv.to_doubles();
    return r;
  }

  DemoLossOutputs loss(const LossProgram& prog, float cap, HostTensor& hidden, HostTensor& w0,
                       HostTensor& w1, std::vector<float>& bias,
                       std::vector<int32_t>& targets) override {
    auto e = DeviceTensor::from(hidden.bits, DType::BF16, hidden.shape, "hidden");
    auto c0 = DeviceTensor::from(w0.bits, DType::BF16, w0.shape, "W_base");
    auto c1 = DeviceTensor::from(w1.bits, DType::BF16, w1.shape, "W_extra");
    std::vector<uint16_t> bias_bits(bias.size());  // bf16-exact floats (DemoRun.cpp)
    for (size_t i = 0; i < bias.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &bias[i], 4);
      bias_bits[i] = static_cast<uint16_t>(u >> 16);
    }
    auto b1 = DeviceTensor::from(bias_bits, DType::BF16, {int64_t(bias.size())}, "b_extra");
    auto t = DeviceTensor::from(targets, DType::I32, {int64_t(targets.size())}, "targets");
    std::vector<float> one{1.0f};
    auto g = DeviceTensor::from(one, DType::F32, {1}, "grad_loss");
    Bindings bind{{"W_base", c0.view}, {"W_extra", c1.view}, {"b_extra", b1.view}, {"cap", cap}};
    DemoLossOutputs r;
    for (int pass = 0; pass < 2; ++pass) {
      EventTimer tf(driver_);
      LinearCeForward fwd = linear_cross_entropy_forward(prog, e.view, bind, t.view, {}, nullptr);
      r.fwd_ms = tf.stop_ms();
      EventTimer tb(driver_);
      LinearCeGradients grads = linear_cross_entropy_backward(fwd, g.view, nullptr);
      r.bwd_ms = tb.stop_ms();
      r.loss = view_to_doubles(fwd.loss)[0];
      r.d_hidden = view_to_doubles(grads.d_hidden);
      r.d_weight0 = view_to_doubles(grads.d_weight[0]);
      r.d_weight1 = view_to_doubles(grads.d_weight[1]);
    }
    return r;
  }

 private:
  Driver& driver_;
};

}  // namespace

std::unique_ptr<DemoDevice> make_gpu_demo_device() { return std::make_unique<GpuDemoDevice>(); }

}  // namespace tilejit::cli
