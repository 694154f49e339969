// The canonical printer: expressions and programs as text-form source (.tj). The text it
// prints parses back (dsl/TextForm.h) to the identical IR, and its sha256 is a program's
// identity, so it prints every field, in one fixed order, with exact numbers.
#pragma once

#include <string>

#include "compiler/IR.h"
#include "compiler/Program.h"

namespace tilejit {

std::string print_expr(const Expr& e);
std::string print_program(const AttentionProgram& p);
std::string print_program(const LossProgram& p);

// Hex sha256 of the canonical text: the program's identity.
std::string program_hash(const AttentionProgram& p);
std::string program_hash(const LossProgram& p);

// Exact text for numbers: the fewest digits that read back to the same f32 (constants) or
// double (loss settings), always with '.', 'e', or inf/nan.
std::string format_f32(double v);
std::string format_f64(double v);

}  // namespace tilejit
