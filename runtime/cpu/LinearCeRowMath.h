// The per-row arithmetic of the CPU fused linear cross-entropy (compiler/IR.h "Loss"): the
// forward's online statistics of one row over vocabulary chunks, and the backward's gradient
// entries of one row over one chunk with the filter's verdict. z are the student's modded logits,
// tz the teacher's, T the KL temperature, L the number of live ids.
#pragma once

#include <cstdint>
#include <limits>

#include "compiler/Program.h"

namespace tilejit::cpu {

// The program's loss constants in fp32.
struct LossTerms {
  float eps = 0, lambda = 0, alpha = 0, temperature = 1, inv_t = 1, live = 1;
  bool kl = false;
  bool ce_probs = true;  // the softmax enters the gradient: alpha < 1 or lambda > 0

  static LossTerms of(const LossProgram& p);
};

// The forward's state of one row: softmax statistics (running max and scaled sum), the target's
// logit and the logits' sum (smoothing); with KL the same for z / T and t / T, and
// cross = sum exp(t/T - m_t) (t/T - z/T) rescaled with m_t.
class LossRowStats {
 public:
  // z: modded logits of one chunk; target: the target's offset in it (outside [0, n): absent).
  // scratch: n floats.
  void add(const float* z, int n, int64_t target, float* scratch);
  // The KL statistics of one chunk; scratch: 3 n floats.
  void add_kl(const LossTerms& k, const float* z, const float* tz, int n, float* scratch);

  struct Result {
    float lse = 0, row_loss = 0, target_logit = 0, tempered_lse = 0, teacher_lse = 0;
  };
  Result finish(const LossTerms& k) const;

 private:
  static constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float m_ = kNegInf, l_ = 0, target_ = 0;
  double zsum_ = 0;
  float ms_ = kNegInf, ls_ = 0, mt_ = kNegInf, lt_ = 0;
  double cross_ = 0;
};

// The backward's coefficients of one row, the upstream gradient u folded in:
//   dL/dz_j = p_scale p_j - uniform - target [j = y] + kl_scale (q_j - pt_j)
// with p = softmax(z), q = softmax(z / T), pt = softmax(t / T).
struct RowGradTerms {
  float lse = 0, p_scale = 0, uniform = 0, target = 0, kl_scale = 0;
  float tempered_lse = 0, teacher_lse = 0;
};
RowGradTerms row_grad_terms(const LossTerms& k, float u, float lse, float tempered_lse,
                            float teacher_lse);

// g[0..n) = dL/dz over one chunk (tz: KL only). Returns whether the chunk is hot: some entry off
// the target has a probability that enters the gradient >= threshold (always, when threshold is
// 0). target: the row's target offset in the chunk, or outside [0, n).
bool chunk_gradient(const LossTerms& k, const RowGradTerms& r, const float* z, const float* tz,
                    int n, int64_t target, float threshold, float* g);

}  // namespace tilejit::cpu
