// The checked inputs of the CPU fused linear cross-entropy (runtime/cpu/CpuLinearCe.h) and the
// vocabulary chunks it works through: every input check (a UserError naming the program and
// tensor), the targets read once (i32 or i64), the live ids cut into chunks of at most kIdChunk
// ids inside one student segment, with where the teacher's rows for the same ids are, and the
// loading of a chunk of weights into fp32.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "compiler/Program.h"
#include "runtime/TensorView.h"
#include "runtime/cpu/CpuLinearCe.h"

namespace tilejit::cpu {

inline constexpr int kRowChunk = 32;
inline constexpr int kIdChunk = 256;

// Rows [v0, v0 + n) of segment `seg`'s weight (and bias).
struct WeightRun {
  int seg = 0;
  int64_t v0 = 0, n = 0;
};

// A run of live ids [id0, id0 + n) inside one student segment: rows [v0, v0 + n) of its weight.
// `teacher`: the same ids in the teacher's layout, one run per teacher segment they cross (empty
// without a teacher layout: the teacher then uses the student's rows).
struct IdChunk {
  int seg = 0;
  int64_t v0 = 0, n = 0, id0 = 0;
  std::vector<WeightRun> teacher;
};

struct LossProblem {
  const LossProgram& prog;
  const CpuLinearCeInputs& in;
  int64_t rows = 0, dim = 0, teacher_dim = 0, live = 0, kept = 0;
  std::vector<IdChunk> chunks = {};
  std::vector<int64_t> targets = {};  // copied once

  bool kl() const { return prog.kl.has_value(); }
  // The teacher has a layout (and weights) of its own.
  bool own_teacher_layout() const { return kl() && !prog.kl->teacher_segments.empty(); }
  bool ignored(int64_t row) const { return targets[row] == prog.ignore_index; }
  int64_t row_chunks() const { return (rows + kRowChunk - 1) / kRowChunk; }
};

// Checks the inputs against the program (and the program's support) and cuts the vocabulary.
LossProblem make_problem(const LossProgram& prog, const CpuLinearCeInputs& in);

// An f32 [N] host vector (input or output).
void check_f32_rows(const TensorView& t, int64_t rows);
// One of the rows a KL term saves for the backward (`what`: its field's name).
void check_kl_rows(const LossProblem& p, const TensorView& t, std::string_view what);
// A gradient output like `like`: a host matrix [rows, dim] or vector [rows] of f32, bf16 or f16.
void check_gradient(const TensorView& t, int rank, int64_t rows, int64_t dim);

// One chunk of a layout's weights in fp32: transposed [dim x kIdChunk] for logits, optionally
// row-major [n x dim] for products, the bias, and optionally the column sum of the rows (for the
// analytic smoothing term of skipped chunks).
struct WeightChunk {
  int64_t n = 0, dim = 0;
  std::vector<float> rows, t, bias, colsum;

  // The student's rows of `c`.
  void load_student(const LossProblem& p, const IdChunk& c, bool keep_rows, bool want_colsum);
  // The teacher's rows of `c` (own_teacher_layout() only).
  void load_teacher(const LossProblem& p, const IdChunk& c);
  // x[j] = <e, row j> + bias[j]: raw logits of one row of hidden states.
  void logits(const float* e, float* x) const;

 private:
  void load(const std::vector<TensorView>& weights, const std::vector<TensorView>& biases,
            const std::vector<Segment>& segments, const std::vector<WeightRun>& runs, int64_t dim,
            bool keep_rows, bool want_colsum);
};

// Rows [r0, r0 + n) of a host matrix [N, dim] in fp32.
std::vector<float> load_rows(const TensorView& t, int64_t r0, int64_t n, int64_t dim);

inline float& f32_at(const TensorView& t, int64_t i) {
  return static_cast<float*>(t.data)[i * t.strides[0]];
}

}  // namespace tilejit::cpu
