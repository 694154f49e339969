// Validation: the first pass, and the only one that trusts nothing. It checks that a program is
// well formed and well typed per IR.h, so every later pass and backend may assume so:
// - every node is typed by the rules of IR.h (binary operands of one type, arithmetic on
//   numbers, logic on bools, Select on a bool condition, Load indices i32 and as many as the
//   buffer's dimensions, a Load's type the value type of its buffer's elements);
// - every param and buffer read is declared (a param with the type it is used at); names are
//   identifiers, unique, and clash with no variable or built-in name;
// - expressions use only their program's variables (attention mask: b, h, q, kv; score also
//   score; loss logit: row, id, logit); the mask is bool, score and logit are f32;
// - loss layouts: segments non-empty, sorted, non-overlapping, ids in [0, 2^31); weights named;
//   label_smoothing in [0, 1), z_loss >= 0, KL alpha in [0, 1] and temperature > 0.
// A failure is a UserError "program 'NAME': <what> in `<expr>`".
#pragma once

#include <string_view>

#include "compiler/Program.h"

namespace tilejit {

// A name the text form can spell: [A-Za-z_][A-Za-z0-9_]*.
bool is_identifier(std::string_view s);
// Names that mean something in programs (variables, literals, types, operators spelled as
// words), so a buffer, param or segment may not take them.
bool is_reserved_name(std::string_view s);

void validate(const AttentionProgram& p);
void validate(const LossProgram& p);

}  // namespace tilejit
