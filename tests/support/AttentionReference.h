// Brute-force fp64 attention (forward and backward) with the hooks as callbacks: the
// independent reference for the attention kernels and executors. Follows the semantics of
// compiler/IR.h exactly: score = scale * <q, k>, then score_mod, then the mask; an all-masked
// row gives O = 0, lse = -inf and zero gradients. Hooks are called only at in-range positions,
// score and score_grad only where the mask holds. Rows are spread over hardware threads.
#pragma once

#include <functional>
#include <vector>

namespace tilejit::testing {

struct AttentionRefShape {
  int batch = 1, heads_q = 1, heads_kv = 1, seq_q = 0, seq_kv = 0, head_dim = 0;
  double scale = 0;  // multiplies <q, k>
};

// Empty callbacks mean: mask all true, identity score, gradient 1.
struct AttentionRefHooks {
  std::function<bool(int b, int h, int q, int kv)> mask;
  std::function<double(double score, int b, int h, int q, int kv)> score;
  std::function<double(double score, int b, int h, int q, int kv)> score_grad;
};

// All tensors contiguous: q, out, d_out, dq [B, Hq, Sq, D]; k, v, dk, dv [B, Hkv, Skv, D];
// lse [B, Hq, Sq] (natural log).
struct AttentionRefForward {
  std::vector<double> out, lse;
};
struct AttentionRefBackward {
  std::vector<double> dq, dk, dv;
};

AttentionRefForward attention_forward_reference(const AttentionRefShape& shape,
                                                const AttentionRefHooks& hooks,
                                                const std::vector<double>& q,
                                                const std::vector<double>& k,
                                                const std::vector<double>& v);

// `out`: the forward output the backward is given, [B, Hq, Sq, D]. Flash backward kernels take
// delta = <dO, O> per row from it; where every row has one unmasked element the exact gradients
// of q and k are 0 and what remains is <dO, O_exact - O_given>, so a kernel is compared with the
// reference given its own (rounded) output. Null: the exact output.
AttentionRefBackward attention_backward_reference(
    const AttentionRefShape& shape, const AttentionRefHooks& hooks, const std::vector<double>& q,
    const std::vector<double>& k, const std::vector<double>& v, const std::vector<double>& d_out,
    const std::vector<double>* out = nullptr);

}  // namespace tilejit::testing
