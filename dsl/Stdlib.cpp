#include "dsl/Stdlib.h"

#include "compiler/Error.h"
#include "dsl/Builders.h"

namespace tilejit::stdlib {

using dsl::b;
using dsl::h;
using dsl::kv;
using dsl::q;
using dsl::score;

Expr causal() { return q >= kv; }

Expr sliding_window(Expr window) { return q >= kv && q - kv < window; }

Expr prefix_lm(Expr prefix_len) { return kv < prefix_len || q >= kv; }

Expr document(const dsl::Buffer& doc) { return doc(b, q) == doc(b, kv); }

Expr chunked(Expr chunk) { return q / chunk == kv / chunk; }

Expr image_block_or_causal(Expr start, Expr end) {
  return q >= kv || (q >= start && q < end && kv >= start && kv < end);
}

Expr mask_and(const Expr& a, const Expr& b) { return a && b; }
Expr mask_or(const Expr& a, const Expr& b) { return a || b; }
Expr mask_not(const Expr& a) { return !a; }

Expr alibi(const dsl::Buffer& slopes) { return score + slopes(h) * f32(kv - q); }

Expr softcap(Expr cap, const Expr& value) { return cap * tanh(value / cap); }

std::vector<AttentionProgram> standard_attention_programs() {
  dsl::Param window("window", Type::I32), chunk("chunk", Type::I32), cap("cap", Type::F32);
  dsl::Param img_start("img_start", Type::I32), img_end("img_end", Type::I32);
  dsl::Buffer prefix("prefix", ElemType::I32, {"B"});
  dsl::Buffer doc("doc", ElemType::I32, {"B", "S"});
  dsl::Buffer slopes("slopes", ElemType::F32, {"H"});
  return {
      AttentionBuilder("causal").mask(causal()).build(),
      AttentionBuilder("sliding_window").param(window).mask(sliding_window(window)).build(),
      AttentionBuilder("prefix_lm").buffer(prefix).mask(prefix_lm(prefix(b))).build(),
      AttentionBuilder("document_causal")
          .buffer(doc)
          .mask(mask_and(document(doc), causal()))
          .build(),
      AttentionBuilder("chunked_causal")
          .param(chunk)
          .mask(mask_and(chunked(chunk), causal()))
          .build(),
      AttentionBuilder("image_block_or_causal")
          .param(img_start)
          .param(img_end)
          .mask(image_block_or_causal(img_start, img_end))
          .build(),
      AttentionBuilder("alibi_causal").buffer(slopes).mask(causal()).score(alibi(slopes)).build(),
      AttentionBuilder("softcap_causal").param(cap).mask(causal()).score(softcap(cap)).build(),
      AttentionBuilder("doc_softcap")
          .buffer(doc)
          .param(cap)
          .mask(mask_and(document(doc), causal()))
          .score(softcap(cap))
          .build(),
  };
}

std::vector<LossProgram> standard_loss_programs() {
  dsl::Param cap("cap", Type::F32);
  return {
      LossBuilder("gemma2_softcap")
          .param(cap)
          .segment("vocab", 0, 256000, "W")
          .logit(softcap(cap, dsl::logit))
          .build(),
      LossBuilder("llama3").segment("vocab", 0, 128256, "W").build(),
      LossBuilder("two_segments")
          .segment("base", 0, 151936, "W_base")
          .segment("extra", 152066, 153090, "W_extra")
          .build(),
      LossBuilder("distill")
          .segment("vocab", 0, 248320, "W")
          .label_smoothing(0.1)
          .z_loss(0.0001)
          .kl(0.15, 1.0, {Segment{"vocab", 0, 248320, "W_teacher", ""}})
          .build(),
  };
}

AttentionProgram standard_attention_program(std::string_view name) {
  for (AttentionProgram& p : standard_attention_programs())
    if (p.name == name) return p;
  user_error("no standard attention program named '{}'", name);
}

}  // namespace tilejit::stdlib
