// Shared pieces of the attention API tests: [B, H, S, D] tensors with their own host storage
// (either memory layout, values rounded to the dtype) and an optional device copy, random
// bound values for a program's buffers and params, and the fp64 reference's hooks from the
// interpreter.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/Interpreter.h"
#include "compiler/Lower.h"
#include "runtime/Bindings.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/TensorView.h"
#include "tests/support/AttentionReference.h"

namespace tilejit::testing {

// Storage of `shape` ([B, H, S, D], or any rank when !bshd) in `dtype`. With `bshd` the storage is
// [B, S, H, D] and the views are its permutation to [B, H, S, D].
class TestTensor {
 public:
  TestTensor(DType dtype, std::vector<int64_t> shape, bool bshd, std::string name);

  int64_t numel() const;
  // Logical element i (row-major over `shape`): read as double / written with the dtype's
  // rounding.
  double get(int64_t i) const;
  void set(int64_t i, double v);
  void fill_random(std::mt19937_64& rng, double amp);
  void fill(double v);
  std::vector<double> values() const;  // logical order

  TensorView host_view();
  TensorView device_view();  // uploads on first use
  void upload();
  void download();       // device -> host storage
  void poison_device();  // 0xFF bytes: NaN for every float dtype

 private:
  int64_t storage_index(int64_t i) const;

  DType dtype_;
  std::vector<int64_t> shape_, strides_;
  std::string name_;
  std::vector<unsigned char> bytes_;
  DeviceBuffer device_;
};

// Values for every buffer and param of `p`: dims B, H, S bound to batch, heads, seq; i32
// buffers hold small ids (sorted along their last axis: document-like), floats small values;
// i32 params in [1, 8], f32 params in [0.5, 4].
struct BoundValues {
  std::vector<std::unique_ptr<TestTensor>> buffers;
  Bindings host, device;  // device: only when `on_device`
};
BoundValues bind_random(const AttentionProgram& p, int batch, int heads, int seq,
                        std::mt19937_64& rng, bool on_device);

// The reference's hooks: the lowered program in the fp64 interpreter over host bindings.
struct ReferenceHooks {
  std::shared_ptr<CompiledEval> mask, score, grad;
  AttentionRefHooks hooks() const;
};
ReferenceHooks reference_hooks(const LoweredAttention& p, const EvalContext& ctx);

// ||got - want|| / max(||want||, floor); NaN anywhere gives +inf.
double rel_l2(const std::vector<double>& got, const std::vector<double>& want, double floor = 1e-6);

}  // namespace tilejit::testing
