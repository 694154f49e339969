// The compiler pipeline from a user's program to what the backends consume:
//
//   validate -> simplify -> differentiate (the gradient of the value modifier)
//
// Each pass is logged. TILEJIT_DUMP_IR=<pass>[,<pass>...] or TILEJIT_DUMP_IR=all prints the
// program to stderr after the named passes; TILEJIT_TIME_PASSES=1 prints each pass's time.
//
// Identity. `hash` is the program_hash (sha256 of the canonical text, compiler/Printer.h) of the
// *simplified* program: the code a backend generates is a function of exactly that program, so
// two spellings that simplify alike share their kernels, and the key is deterministic (the
// canonical text and simplification both are). A change to the simplifier changes keys only
// together with tilejit's version, which is also part of every cache key.
#pragma once

#include <string>

#include "compiler/Program.h"

namespace tilejit {

struct LoweredAttention {
  AttentionProgram program;   // validated and simplified
  Expr score_grad;            // d score / d score, simplified; f32 over score, b, h, q, kv
  std::string hash;           // program_hash(program)
  bool mask_is_true = false;  // no element is ever masked
  bool mask_reads_buffers = false;
  bool score_reads_buffers = false;
  bool score_is_identity = false;  // score == score: no hook needed
  bool score_grad_is_one = false;  // backward needs no per-element factor
};

struct LoweredLoss {
  LossProgram program;  // validated and simplified
  Expr logit_grad;      // d logit / d logit, simplified; f32 over logit, row, id
  std::string hash;     // program_hash(program)
  bool logit_reads_buffers = false;
  bool logit_is_identity = false;
  bool logit_grad_is_one = false;
};

// Raises UserError for an invalid program (see compiler/Validate.h).
LoweredAttention lower(const AttentionProgram& p);
LoweredLoss lower(const LossProgram& p);

}  // namespace tilejit
