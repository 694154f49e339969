// Random well-typed programs for property tests (round trips, simplify, differentiate,
// codegen, interval analysis). Deterministic for a given seed.
#pragma once

#include <cstdint>
#include <random>

#include "compiler/Program.h"

namespace tilejit::testing {

struct RandomProgramOptions {
  int max_depth = 5;        // expression depth
  bool use_buffers = true;  // declare buffers and read them (indices built from index vars)
  bool use_params = true;   // declare params and use them
  bool use_transcendentals = true;
  bool use_special_floats = true;  // constants -0.0, +-inf and nan appear now and then
};

// A random expression of type `t` over the given variables, buffers and params.
Expr random_expr(std::mt19937_64& rng, Type t, const std::vector<Expr>& int_vars,
                 const std::vector<Expr>& float_vars, const std::vector<BufferDecl>& buffers,
                 const std::vector<ParamDecl>& params, int depth,
                 const RandomProgramOptions& opt = {});

AttentionProgram random_attention_program(std::mt19937_64& rng,
                                          const RandomProgramOptions& opt = {});
LossProgram random_loss_program(std::mt19937_64& rng, const RandomProgramOptions& opt = {});

}  // namespace tilejit::testing
