// Small hand-built programs whose generated CUDA is checked in as goldens (tests/codegen/golden/)
// and compiled with NVRTC. Built with the C++ DSL directly, so they change only when this file
// does.
#pragma once

#include "compiler/Program.h"
#include "dsl/Expr.h"

namespace tilejit::testing {

// Document mask, causal, soft-capped score with its derivative written out by hand.
inline AttentionProgram golden_doc_softcap(Expr* score_grad) {
  using namespace dsl;
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  Param cap("cap", Type::F32);
  AttentionProgram p;
  p.name = "doc_softcap";
  p.buffers = {{"doc", ElemType::I32, {"B", "S"}}};
  p.params = {{"cap", Type::F32}};
  p.mask = doc(b, q) == doc(b, kv) && q >= kv;
  Expr t = tanh(score / cap);
  p.score = cap * t;
  *score_grad = 1.0 - t * t;
  return p;
}

// Biases per row and per column, one of them scaled by a param (a product the kv part holds
// whole, which the folded logit reads from the part), and a distance term.
inline AttentionProgram golden_row_column_bias(Expr* score_grad) {
  using namespace dsl;
  Buffer rows("rows", ElemType::F32, {"H", "S"}), cols("cols", ElemType::F32, {"B", "S"});
  Buffer slopes("slopes", ElemType::F32, {"H"});
  Param w("w", Type::F32);
  AttentionProgram p;
  p.name = "row_column_bias";
  p.buffers = {{"rows", ElemType::F32, {"H", "S"}},
               {"cols", ElemType::F32, {"B", "S"}},
               {"slopes", ElemType::F32, {"H"}}};
  p.params = {{"w", Type::F32}};
  p.mask = q >= kv;
  p.score = rows(h, q) + score + slopes(h) * f32(kv - q) - w * cols(b, kv);
  *score_grad = lit(1.0);
  return p;
}

// Select arms with their own buffer reads, a node shared by both arms and the condition, bf16
// and f16 buffers, an i32 param, casts and negative constants.
inline AttentionProgram golden_select_branches(Expr* score_grad) {
  using namespace dsl;
  Buffer doc("doc", ElemType::I32, {"B", "S"});
  Buffer bias("bias", ElemType::BF16, {"H", "S"});
  Buffer gate("gate", ElemType::F16, {"S"});
  Param n("n", Type::I32);
  AttentionProgram p;
  p.name = "select_branches";
  p.buffers = {{"doc", ElemType::I32, {"B", "S"}},
               {"bias", ElemType::BF16, {"H", "S"}},
               {"gate", ElemType::F16, {"S"}}};
  p.params = {{"n", Type::I32}};
  Expr d = kv - q;
  p.mask = select(q < Expr(n), doc(b, q) == doc(b, kv), d <= 0 && d > -1024);
  Expr shared = f32(d) * -0.5;
  p.score = score + select(kv % 7 == 3, bias(h, kv) + shared, gate(kv) * shared) - shared;
  *score_grad = lit(1.0);
  return p;
}

// Nothing captured: an always-true mask and the identity score.
inline AttentionProgram golden_plain(Expr* score_grad) {
  AttentionProgram p;
  p.name = "plain";
  *score_grad = lit(1.0);
  return p;
}

// A loss program's logit hooks: soft-capping with a temperature param.
inline LossProgram golden_loss_softcap(Expr* logit_grad) {
  using namespace dsl;
  Param inv_t("inv_t", Type::F32);
  LossProgram p;
  p.name = "loss_softcap";
  p.params = {{"inv_t", Type::F32}};
  p.segments = {{.name = "base", .begin = 0, .end = 1000, .weight = "lm_head", .bias = ""}};
  Expr t = tanh(logit * Expr(inv_t));
  p.logit = 30.0 * t;
  *logit_grad = 30.0 * Expr(inv_t) * (1.0 - t * t);
  return p;
}

// A loss program whose hooks have both parts: soft-capping (the constant part holds 1 / cap) with
// a per-row temperature (the row part holds 1 / temp[row]).
inline LossProgram golden_loss_row_temperature(Expr* logit_grad) {
  using namespace dsl;
  Param cap("cap", Type::F32);
  Buffer temp("temp", ElemType::F32, {"N"});
  LossProgram p;
  p.name = "loss_row_temperature";
  p.buffers = {{"temp", ElemType::F32, {"N"}}};
  p.params = {{"cap", Type::F32}};
  p.segments = {{.name = "base", .begin = 0, .end = 1000, .weight = "lm_head", .bias = ""}};
  Expr t = tanh(logit / cap);
  p.logit = cap * t / temp(row);
  *logit_grad = (1.0 - t * t) / temp(row);
  return p;
}

}  // namespace tilejit::testing
