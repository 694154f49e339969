// The text form of programs (.tj files): a parser for exactly what compiler/Printer.h prints,
// plus comments (`#` to end of line) and the defaults the printer always spells out. Printing a
// program and parsing the text gives back the same program, with the same hash-consed
// expression nodes.
//
//   attention doc_softcap {
//     buffer doc : i32[B, S]
//     param cap : f32
//     mask = doc[b, q] == doc[b, kv] && q >= kv
//     score = cap * tanh(score / cap)
//   }
//
// Statements end at a newline (or at the closing brace); inside parentheses or brackets a
// newline is just space. In an expression, a '-' written directly against a number is part of
// the literal (`-1` is the constant -1, `- 1` and `-(1)` negate 1), which is how the printer
// spells negative constants.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include "compiler/Error.h"
#include "compiler/Program.h"

namespace tilejit {

using ParsedProgram = std::variant<AttentionProgram, LossProgram>;

// A malformed program text. what() is "file:line:col: message", then the source line and a
// caret under the column; the parts are available separately for tools and tests.
class ParseError : public UserError {
 public:
  ParseError(std::string file, int line, int column, std::string message,
             std::string_view source_line);
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  int line_;
  int column_;
  std::string message_;
};

ParsedProgram parse_program(std::string_view text, std::string_view filename = "<input>");
// As parse_program, but the text must hold a program of that kind (UserError otherwise).
AttentionProgram parse_attention(std::string_view text, std::string_view filename = "<input>");
LossProgram parse_loss(std::string_view text, std::string_view filename = "<input>");

// Reads and parses a .tj file; a file that cannot be read is a UserError.
ParsedProgram load_program(const std::string& path);

}  // namespace tilejit
