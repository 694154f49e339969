// Where `tilejit demo` runs its workloads: the GPU through the JIT kernels, or the CPU backend.
// Inputs are host tensors of bf16 values (also kept as doubles for the fp64 reference); outputs
// come back as doubles.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/Program.h"
#include "runtime/Bindings.h"
#include "runtime/BlockMask.h"
#include "runtime/TensorView.h"

namespace tilejit::cli {

struct HostTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<uint16_t> bits;  // bf16
  std::vector<double> values;  // the same values, exactly

  static HostTensor random_bf16(std::string name, std::vector<int64_t> shape, std::mt19937_64& rng,
                                double stddev = 1.0);
  TensorView view();  // host, contiguous, bf16
};

struct DemoAttentionOutputs {
  std::vector<double> out, lse, dq, dk, dv;
  double fwd_ms = 0, bwd_ms = 0;
};

struct DemoLossOutputs {
  double loss = 0;
  std::vector<double> d_hidden, d_weight0, d_weight1;
  double fwd_ms = 0, bwd_ms = 0;
};

class DemoDevice {
 public:
  virtual ~DemoDevice() = default;
  virtual std::string name() const = 0;
  // `host_bind` holds host-memory buffers; a GPU device copies them over.
  virtual DemoAttentionOutputs attention(const AttentionProgram& prog, const Bindings& host_bind,
                                         const BlockMask& mask, HostTensor& q, HostTensor& k,
                                         HostTensor& v, HostTensor& d_out) = 0;
  // The demo's two-segment layout: W_base, W_extra with bias b_extra, param cap.
  virtual DemoLossOutputs loss(const LossProgram& prog, float cap, HostTensor& hidden,
                               HostTensor& w0, HostTensor& w1, std::vector<float>& bias,
                               std::vector<int32_t>& targets) = 0;
};

std::unique_ptr<DemoDevice> make_cpu_demo_device();
std::unique_ptr<DemoDevice> make_gpu_demo_device();

// bf16 <-> float, round to nearest even.
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

}  // namespace tilejit::cli
