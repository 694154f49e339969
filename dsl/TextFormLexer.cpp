#include "dsl/TextFormLexer.h"

#include <fmt/format.h>

#include "dsl/TextForm.h"

namespace tilejit {

namespace {

std::string format_parse_error(std::string_view file, int line, int column,
                               std::string_view message, std::string_view source_line) {
  // The caret keeps the line's tabs so it lines up however tabs are shown.
  std::string pad;
  for (size_t i = 0; i + 1 < static_cast<size_t>(column) && i < source_line.size(); ++i)
    pad += source_line[i] == '\t' ? '\t' : ' ';
  return fmt::format("{}:{}:{}: {}\n{}\n{}^", file, line, column, message, source_line, pad);
}

}  // namespace

ParseError::ParseError(std::string file, int line, int column, std::string message,
                       std::string_view source_line)
    : UserError(format_parse_error(file, line, column, message, source_line)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(std::move(message)) {}

namespace textform {

std::string_view Source::line(int n) const {
  size_t begin = 0;
  for (int i = 1; i < n && begin < text.size(); ++i) {
    size_t nl = text.find('\n', begin);
    begin = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  size_t end = text.find('\n', begin);
  std::string_view l = text.substr(begin, end == std::string_view::npos ? end : end - begin);
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  return l;
}

void Source::fail(int line, int col, std::string message) const {
  throw ParseError(file, line, col, std::move(message), this->line(line));
}

namespace {

bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool digit(char c) { return c >= '0' && c <= '9'; }
bool ident_char(char c) { return ident_start(c) || digit(c); }

std::string describe_char(char c) {
  if (c > ' ' && c < 127) return fmt::format("'{}'", c);
  return fmt::format("byte 0x{:02x}", static_cast<unsigned char>(c));
}

class Lexer {
 public:
  explicit Lexer(const Source& src) : src_(src), t_(src.text) {}

  std::vector<Token> run() {
    while (i_ < t_.size()) step();
    push_end();
    return std::move(out_);
  }

 private:
  int col(size_t at) const { return static_cast<int>(at - line_start_) + 1; }
  void push(Tok k, size_t start) {
    out_.push_back({k, t_.substr(start, i_ - start), line_, col(start), start});
  }
  [[noreturn]] void fail(size_t at, std::string msg) const {
    src_.fail(line_, col(at), std::move(msg));
  }

  void step() {
    char c = t_[i_];
    size_t start = i_;
    if (c == '\n') {
      // Inside ( ) or [ ] a newline is space, so long expressions may wrap.
      if (depth_ == 0) out_.push_back({Tok::Newline, t_.substr(i_, 1), line_, col(i_), i_});
      ++i_;
      ++line_;
      line_start_ = i_;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i_;
    } else if (c == '#') {
      while (i_ < t_.size() && t_[i_] != '\n') ++i_;
    } else if (ident_start(c)) {
      while (i_ < t_.size() && ident_char(t_[i_])) ++i_;
      push(Tok::Ident, start);
    } else if (digit(c)) {
      number();
      push(Tok::Number, start);
    } else {
      punct();
    }
  }

  void digits(std::string_view what) {
    if (i_ >= t_.size() || !digit(t_[i_])) fail(i_, fmt::format("expected a digit {}", what));
    while (i_ < t_.size() && digit(t_[i_])) ++i_;
  }

  // digits [. digits] [(e|E) [+|-] digits]
  void number() {
    size_t start = i_;
    digits("");
    if (i_ < t_.size() && t_[i_] == '.') {
      ++i_;
      digits("after '.'");
    }
    if (i_ < t_.size() && (t_[i_] == 'e' || t_[i_] == 'E')) {
      ++i_;
      if (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) ++i_;
      digits("in the exponent");
    }
    if (i_ < t_.size() && (ident_char(t_[i_]) || t_[i_] == '.')) {
      while (i_ < t_.size() && (ident_char(t_[i_]) || t_[i_] == '.')) ++i_;
      fail(start, fmt::format("malformed number '{}'", t_.substr(start, i_ - start)));
    }
  }

  void punct() {
    static constexpr std::string_view kTwo[] = {"==", "!=", "<=", ">=", "&&", "||"};
    static constexpr std::string_view kOne = "{}[](),:=<>+-*/%!";
    size_t start = i_;
    for (std::string_view p : kTwo) {
      if (t_.substr(i_, 2) == p) {
        i_ += 2;
        return push(Tok::Punct, start);
      }
    }
    char c = t_[i_];
    if (c == '&' || c == '|')
      fail(i_, fmt::format("unexpected '{0}' (logical operators are '{0}{0}')", c));
    if (kOne.find(c) == std::string_view::npos)
      fail(i_, fmt::format("unexpected character {}", describe_char(c)));
    if (c == '(' || c == '[') ++depth_;
    if ((c == ')' || c == ']') && depth_ > 0) --depth_;
    ++i_;
    push(Tok::Punct, start);
  }

  // The end sits after the last line's text, not on an empty line past the final newline, so
  // "missing '}'" points somewhere visible.
  void push_end() {
    if (t_.empty() || t_.back() != '\n') {
      out_.push_back({Tok::End, {}, line_, col(i_), t_.size()});
      return;
    }
    size_t last = t_.size() - 1;  // the final newline
    size_t prev = last == 0 ? std::string_view::npos : t_.rfind('\n', last - 1);
    size_t begin = prev == std::string_view::npos ? 0 : prev + 1;
    out_.push_back({Tok::End, {}, line_ - 1, static_cast<int>(last - begin) + 1, t_.size()});
  }

  const Source& src_;
  std::string_view t_;
  size_t i_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
  int depth_ = 0;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> tokenize(const Source& src) { return Lexer(src).run(); }

}  // namespace textform
}  // namespace tilejit
