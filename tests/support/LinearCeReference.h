// Fused linear cross-entropy in fp64 on the CPU: the reference the loss kernels are checked
// against. Plain C++ (no CUDA, no tilejit library): materializes the logits, so it is meant for
// test-sized problems. Semantics as in compiler/IR.h "Loss", the KL term included (the teacher is
// frozen: no teacher gradients).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace tilejit::testing {

enum class RefReduction { None, Sum, Mean };

struct RefSegment {
  int64_t begin = 0;  // global id of row 0
  int64_t size = 0;
  const float* weight = nullptr;  // [size, dim], row-major
  const float* bias = nullptr;    // [size] or nullptr
};

// The KL term: T^2 * KL(softmax(t / T) || softmax(z / T)) blended with weight alpha; the teacher's
// logits t = logit_mod(E_t C_t^T + b_t) come from its hidden states through its own segments
// (empty: the student's segments, then teacher_dim == dim).
struct RefKl {
  double alpha = 0, temperature = 1;
  const float* teacher_hidden = nullptr;  // [n_rows, teacher_dim]
  int64_t teacher_dim = 0;
  std::vector<RefSegment> teacher_segments = {};
};

struct RefLinearCe {
  int64_t n_rows = 0, dim = 0;
  const float* hidden = nullptr;     // [n_rows, dim]
  const int32_t* targets = nullptr;  // [n_rows] global ids or ignore_index
  std::vector<RefSegment> segments = {};
  int64_t ignore_index = -100;
  double label_smoothing = 0, z_loss = 0;
  RefReduction reduction = RefReduction::Mean;
  // logit_mod(logit, row, id) and its derivative; empty: identity.
  std::function<double(double, int64_t, int64_t)> logit_mod = {}, logit_grad = {};
  // Upstream gradient: [n_rows] for reduction none, [1] otherwise; nullptr means 1.
  const float* upstream = nullptr;
  std::optional<RefKl> kl = {};
  // > 0: also report how far a gradient filtered at this threshold may be from the dense one
  // (the *_slack results): the sum of |entry| * |operand| over the entries a filter may drop:
  // entries off the target whose every probability that enters the gradient is below the
  // threshold, less the uniform smoothing term, which a filter keeps analytically.
  double filter_threshold = 0;
};

struct RefLinearCeResult {
  double loss = 0;                            // reduced loss (none: the sum of row losses)
  std::vector<double> row_loss;               // [n_rows], 0 on ignored rows
  std::vector<double> lse;                    // [n_rows], 0 on ignored rows
  std::vector<double> tempered_lse;           // [n_rows]: lse of z / T (KL only; else empty)
  std::vector<double> teacher_lse;            // [n_rows]: lse of t / T (KL only; else empty)
  std::vector<double> d_hidden;               // [n_rows * dim]
  std::vector<std::vector<double>> d_weight;  // per segment [size * dim]
  std::vector<std::vector<double>> d_bias;    // per segment [size] (empty without bias)
  // With filter_threshold > 0, bounds on |filtered - dense| for each gradient element.
  std::vector<double> d_hidden_slack;
  std::vector<std::vector<double>> d_weight_slack, d_bias_slack;
};

// Loss and gradients; uses up to `threads` host threads (0: hardware concurrency).
RefLinearCeResult reference_linear_ce(const RefLinearCe& problem, int threads = 0);

}  // namespace tilejit::testing
