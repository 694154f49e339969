// The lexer of the text form (dsl/TextForm.h): source text to tokens with line and column, and
// the one place that turns a position into a ParseError with the offending line and a caret.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tilejit::textform {

enum class Tok : uint8_t { Ident, Number, Punct, Newline, End };

struct Token {
  Tok kind;
  std::string_view text;  // into the source; empty for End
  int line;               // 1-based
  int col;                // 1-based, in bytes
  size_t offset;
};

struct Source {
  std::string_view text;
  std::string file;

  std::string_view line(int n) const;
  // Throws a ParseError at (line, col).
  [[noreturn]] void fail(int line, int col, std::string message) const;
};

// Identifiers, numbers (digits [. digits] [e [+-] digits]), punctuation and statement-ending
// newlines; `#` comments and other space dropped. Ends with one End token.
std::vector<Token> tokenize(const Source& src);

}  // namespace tilejit::textform
