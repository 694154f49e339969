// Random mask-shaped programs and their bindings for the mask-analysis tests: the structures
// real masks have (affine comparisons of q and kv, chunking, windows, buffer equalities,
// params), combined with && || ! and select, plus random buffer contents (sorted document ids,
// unsorted ids, floats with NaN) and params. Deterministic for a seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "compiler/Interpreter.h"
#include "compiler/Program.h"

namespace tilejit::testing {

// A random mask over b, h, q, kv reading `doc : i32[B, S]`, `score_bias : f32[H, S]`,
// `prefix : i32[B]` and params `w : i32`, `c : i32`, `t : f32`.
AttentionProgram random_mask_program(std::mt19937_64& rng, int depth = 3);

// Owned buffer memory plus the EvalContext viewing it.
struct MaskBindings {
  std::vector<std::vector<unsigned char>> storage;
  EvalContext ctx;
};

// Values for `prog`'s buffers and params: dims B = batch, H = heads, S = seq; i32 buffers
// hold sorted runs of ids or random ids, float buffers random values with a NaN now and then.
MaskBindings random_mask_bindings(std::mt19937_64& rng, const AttentionProgram& prog, int batch,
                                  int heads, int seq);

}  // namespace tilejit::testing
