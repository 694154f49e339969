// Shared pieces of the CPU executor tests: host tensors that own their memory, random bound
// values for a program's buffers and params, a brute-force block mask (every element evaluated),
// and the fp64 interpreter as the reference's hooks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/Interpreter.h"
#include "compiler/Lower.h"
#include "runtime/Bindings.h"
#include "runtime/BlockMask.h"
#include "runtime/TensorView.h"
#include "tests/support/AttentionReference.h"

namespace tilejit::testing {

// A host tensor with its own storage; view() has the given strides (contiguous by default).
struct HostTensor {
  std::vector<unsigned char> bytes;
  TensorView view;

  static HostTensor make(DType dtype, std::vector<int64_t> shape, std::string name,
                         std::vector<int64_t> strides = {});
  // Element i (in storage order) as double / set from double, with the dtype's rounding.
  double get(int64_t storage_index) const;
  void set(int64_t storage_index, double v);
  int64_t storage_elems() const { return static_cast<int64_t>(bytes.size() / dtype_size(view.dtype)); }
  double at(const std::vector<int64_t>& index) const;  // by logical index
  void fill(double v);
};

// [B, H, S, D] as a strided view of [B, S, H, D] storage when `bshd`.
HostTensor make_attention_tensor(DType dtype, int b, int h, int s, int d, bool bshd,
                                 std::string name);
// Uniform values in [-amp, amp], rounded to the dtype.
void fill_random(HostTensor& t, std::mt19937_64& rng, double amp);
// Contiguous [B, H, S, D] doubles of a logical 4-d tensor.
std::vector<double> to_doubles(const HostTensor& t);

// Values for every buffer and param a program declares. Dimension sizes come from `dims`
// (name -> size; missing names get 7). Integer buffers with two dimensions get sorted ids
// (document-like), one-dimensional integer buffers values in [0, max(dims)]; floats small values.
// Params: the named defaults below, else small random values.
struct BoundValues {
  std::vector<std::unique_ptr<HostTensor>> buffers;
  Bindings bindings;
};
BoundValues bind_random(const std::vector<BufferDecl>& buffers, const std::vector<ParamDecl>& params,
                        const std::map<std::string, int64_t>& dims, std::mt19937_64& rng);

// The fp64 interpreter over `bind`.
EvalContext eval_context(const Bindings& bind, FloatPrecision precision = FloatPrecision::F64);

// Every tile classified by evaluating the mask at every element.
BlockMask brute_force_block_mask(const AttentionProgram& p, const EvalContext& ctx, int batch,
                                 int heads, int seq_q, int seq_kv, int block_q, int block_kv);

// The reference's hooks: the program in the fp64 interpreter (the contexts are kept alive).
struct ReferenceHooks {
  std::shared_ptr<CompiledEval> mask, score, grad;
  AttentionRefHooks hooks() const;
};
ReferenceHooks reference_hooks(const LoweredAttention& p, const EvalContext& ctx);

// max |a - b| / (atol + rtol |b|) over all elements (<= 1 passes); NaN anywhere fails.
double scaled_error(const std::vector<double>& got, const std::vector<double>& want, double atol,
                    double rtol);

}  // namespace tilejit::testing
