// score_mod's logit in the log2 domain, generated with the multiplications around it folded per
// row (compiler/codegen/ScoreFold.h): the hooks `score_log2` (all kernels' forward) and
// `score_log2_grad` (with score_grad, for the backward), written into TjProgram by
// CudaCodegen.cpp after score_mod's and score_grad's own hooks, whose parts they read.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "compiler/IR.h"
#include "compiler/codegen/HookSplit.h"

namespace tilejit {

// Where generated hook bodies come from and what they may assume (CudaCodegen.cpp).
struct HookSourceInfo {
  std::string_view file;                                        // the `#line` file name
  const std::unordered_map<std::string, std::string>& members;  // TjArgs members by name
  bool positions_bounded;                                       // PositionRange.h
};

// log2e * score_mod(scale * acc) from the raw product, with the factors around it multiplied per
// row; `split` is score_mod's (its parts, which the function reads). Writes nothing (kernels
// multiply score_mod's result by log2e) where folding saves nothing. Declares `kScoreLog2`.
void write_score_log2(std::string& out, const Expr& body, const HookSplit& split,
                      const HookSourceInfo& info);

// score_mod's log2-domain logit and score_grad in one function, where both read score only
// through the same node (score / cap): that node folded as in score_log2 and computed once with
// everything the two bodies share (a soft-cap's tanh). Declares `kScoreGradLog2`.
void write_score_log2_grad(std::string& out, const Expr& score, const Expr& grad,
                           const HookSourceInfo& info);

}  // namespace tilejit
