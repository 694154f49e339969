// The standard library of attention modifiers: the masks and score transforms people reach for,
// as ordinary expressions (so they compose with && / || and analyse like hand-written ones),
// plus the ready-made example programs that tests and the demo share with examples/programs/.
#pragma once

#include <string_view>
#include <vector>

#include "compiler/Program.h"
#include "dsl/Expr.h"

namespace tilejit::stdlib {

// Masks (bool over b, h, q, kv).
Expr causal();                                     // q >= kv
Expr sliding_window(Expr window);                  // causal, at most `window` back
Expr prefix_lm(Expr prefix_len);                   // bidirectional prefix, causal after
Expr document(const dsl::Buffer& doc);             // same document id: doc[b,q] == doc[b,kv]
Expr chunked(Expr chunk);                          // same chunk: q / C == kv / C
Expr image_block_or_causal(Expr start, Expr end);  // causal, or both inside [start, end)
Expr mask_and(const Expr& a, const Expr& b);       // a && b
Expr mask_or(const Expr& a, const Expr& b);        // a || b
Expr mask_not(const Expr& a);                      // !a

// Score modifiers (f32). softcap also serves loss programs: softcap(cap, dsl::logit).
Expr alibi(const dsl::Buffer& slopes);                   // score + slopes[h] * f32(kv - q)
Expr softcap(Expr cap, const Expr& value = dsl::score);  // cap * tanh(value / cap)

// The programs of examples/programs/*.tj, built with the builders; each program's name is its
// file's stem.
std::vector<AttentionProgram> standard_attention_programs();
std::vector<LossProgram> standard_loss_programs();
// One of them by name (UserError if there is none).
AttentionProgram standard_attention_program(std::string_view name);

}  // namespace tilejit::stdlib
