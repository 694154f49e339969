#include "dsl/TextForm.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "dsl/Builders.h"
#include "dsl/Expr.h"
#include "dsl/TextFormLexer.h"

namespace tilejit {

namespace {

using textform::Source;
using textform::Tok;
using textform::Token;

// ---------------------------------------------------------------------------------------------
// Parser

constexpr int kMaxNesting = 1000;  // parser recursion (parentheses, unary chains)
constexpr int kMaxDepth = 10000;   // depth of the built expression (printing recurses on it)

struct BinaryOp {
  std::string_view spelling;
  Op op;
  int prec;
};
constexpr BinaryOp kBinary[] = {
    {"||", Op::Or, 1}, {"&&", Op::And, 2}, {"==", Op::Eq, 3}, {"!=", Op::Ne, 3}, {"<", Op::Lt, 4},
    {"<=", Op::Le, 4}, {">", Op::Gt, 4},   {">=", Op::Ge, 4}, {"+", Op::Add, 5}, {"-", Op::Sub, 5},
    {"*", Op::Mul, 6}, {"/", Op::Div, 6},  {"%", Op::Mod, 6}};

struct Function {
  std::string_view name;
  Op op;
};
constexpr Function kFunctions[] = {{"abs", Op::Abs},   {"exp", Op::Exp},      {"exp2", Op::Exp2},
                                   {"log", Op::Log},   {"log2", Op::Log2},    {"tanh", Op::Tanh},
                                   {"sqrt", Op::Sqrt}, {"rsqrt", Op::Rsqrt},  {"min", Op::Min},
                                   {"max", Op::Max},   {"select", Op::Select}};

std::optional<Type> cast_type(std::string_view s) {
  if (s == "f32") return Type::F32;
  if (s == "i32") return Type::I32;
  if (s == "bool") return Type::Bool;
  return std::nullopt;
}

class Parser {
 public:
  explicit Parser(const Source& src) : src_(src), toks_(tokenize(src)) {}

  ParsedProgram parse_file();

 private:
  // Tokens.
  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  static bool is(const Token& t, std::string_view punct) {
    return t.kind == Tok::Punct && t.text == punct;
  }
  static bool is_word(const Token& t, std::string_view w) {
    return t.kind == Tok::Ident && t.text == w;
  }
  static std::string describe(const Token& t) {
    if (t.kind == Tok::End) return "end of input";
    if (t.kind == Tok::Newline) return "end of line";
    return fmt::format("'{}'", t.text);
  }
  [[noreturn]] void fail(const Token& at, std::string msg) const {
    src_.fail(at.line, at.col, std::move(msg));
  }
  const Token& expect(std::string_view punct, std::string_view context);
  const Token& expect_word(std::string_view word, std::string_view context);
  const Token& expect_ident(std::string_view what);
  void skip_newlines() {
    while (peek().kind == Tok::Newline) next();
  }
  void end_statement();

  // Declarations and statements.
  void check_new_name(const Token& name, std::string_view what);
  BufferDecl parse_buffer();
  ParamDecl parse_param();
  void once(const Token& keyword);
  AttentionProgram parse_attention(const Token& name);
  LossProgram parse_loss(const Token& name);
  void parse_loss_statement(const Token& kw, LossBuilder& builder);
  Segment parse_segment(const std::vector<Segment>& before);
  double parse_f64();
  int64_t parse_i64();

  // Expressions.
  Expr parse_value(std::string_view stmt, Type want, std::vector<std::string_view> vars);
  Expr parse_expr() { return parse_binary(1); }
  Expr parse_binary(int min_prec);
  Expr parse_unary();
  Expr parse_primary();
  // Out of line: their many temporaries (formatted errors, argument lists) would otherwise be
  // inlined into every frame of the parentheses' and unary chains' recursion, which kMaxNesting
  // bounds in levels, not bytes (under ASan such a frame took 8.5 KB, and 1000 levels overflowed
  // an 8 MB stack).
  [[gnu::noinline]] Expr parse_literal(const Token& t, bool negative);
  [[gnu::noinline]] Expr parse_name(const Token& t);
  std::vector<Expr> parse_list(std::string_view close, std::string_view context,
                               std::vector<Token>* starts);
  Expr apply_at(const Token& at, Op op, const std::vector<Expr>& args);
  Expr track(const Token& at, Expr e);

  const Source& src_;
  std::vector<Token> toks_;
  size_t pos_ = 0;

  std::vector<BufferDecl> buffers_;
  std::vector<ParamDecl> params_;
  std::map<std::string, int, std::less<>> declared_;  // name -> line
  std::map<std::string, int, std::less<>> seen_;      // once-only statement -> line
  std::string_view stmt_;                             // statement being parsed ("mask", ...)
  std::vector<std::string_view> vars_;                // variables it may read
  int nesting_ = 0;
  std::unordered_map<const Node*, int> depth_;

  // Loss layout and KL term, handed to the builder at the closing brace since teacher segments
  // follow the kl line.
  std::vector<Segment> segments_;
  std::vector<Segment> teacher_;
  std::optional<std::pair<double, double>> kl_;  // alpha, temperature
};

const Token& Parser::expect(std::string_view punct, std::string_view context) {
  if (!is(peek(), punct))
    fail(peek(), fmt::format("expected '{}' {}, got {}", punct, context, describe(peek())));
  return next();
}

const Token& Parser::expect_word(std::string_view word, std::string_view context) {
  if (!is_word(peek(), word))
    fail(peek(), fmt::format("expected '{}' {}, got {}", word, context, describe(peek())));
  return next();
}

const Token& Parser::expect_ident(std::string_view what) {
  if (peek().kind != Tok::Ident)
    fail(peek(), fmt::format("expected {}, got {}", what, describe(peek())));
  return next();
}

void Parser::end_statement() {
  if (peek().kind == Tok::Newline) return skip_newlines();
  if (is(peek(), "}")) return;
  fail(peek(), fmt::format("expected end of line after the statement, got {}", describe(peek())));
}

ParsedProgram Parser::parse_file() {
  skip_newlines();
  const Token& kw = peek();
  if (!is_word(kw, "attention") && !is_word(kw, "loss"))
    fail(kw, fmt::format("expected 'attention' or 'loss', got {}", describe(kw)));
  next();
  const Token& name = expect_ident("a program name");
  expect("{", fmt::format("after the program name '{}'", name.text));
  ParsedProgram result;
  if (kw.text == "attention")
    result = parse_attention(name);
  else
    result = parse_loss(name);
  skip_newlines();
  if (peek().kind != Tok::End)
    fail(peek(), fmt::format("expected end of input after the program (one program per file), "
                             "got {}",
                             describe(peek())));
  return result;
}

void Parser::check_new_name(const Token& name, std::string_view what) {
  if (is_reserved_name(name.text))
    fail(name, fmt::format("'{}' is reserved and cannot name a {}", name.text, what));
  auto it = declared_.find(name.text);
  if (it != declared_.end())
    fail(name, fmt::format("'{}' is already declared on line {}", name.text, it->second));
  declared_.emplace(std::string(name.text), name.line);
}

// buffer NAME : ELEM[DIM, ...]
BufferDecl Parser::parse_buffer() {
  next();
  const Token& name = expect_ident("a buffer name");
  check_new_name(name, "buffer");
  expect(":", "after the buffer name");
  const Token& elem = expect_ident("an element type (i32, f32, bf16 or f16)");
  BufferDecl d{std::string(name.text), ElemType::I32, {}};
  static const std::map<std::string_view, ElemType> kElems = {{"i32", ElemType::I32},
                                                              {"f32", ElemType::F32},
                                                              {"bf16", ElemType::BF16},
                                                              {"f16", ElemType::F16}};
  auto it = kElems.find(elem.text);
  if (it == kElems.end())
    fail(elem,
         fmt::format("unknown element type '{}' (expected i32, f32, bf16 or f16)", elem.text));
  d.elem = it->second;
  expect("[", "before the buffer's dimensions");
  do d.dims.emplace_back(expect_ident("a dimension name").text);
  while (is(peek(), ",") && (next(), true));
  expect("]", "after the buffer's dimensions");
  buffers_.push_back(d);
  return d;
}

// param NAME : f32|i32
ParamDecl Parser::parse_param() {
  next();
  const Token& name = expect_ident("a param name");
  check_new_name(name, "param");
  expect(":", "after the param name");
  const Token& type = expect_ident("a param type (f32 or i32)");
  if (type.text != "f32" && type.text != "i32")
    fail(type, fmt::format("a param is f32 or i32, not '{}'", type.text));
  ParamDecl d{std::string(name.text), type.text == "f32" ? Type::F32 : Type::I32};
  params_.push_back(d);
  return d;
}

void Parser::once(const Token& kw) {
  auto it = seen_.find(kw.text);
  if (it != seen_.end())
    fail(kw, fmt::format("'{}' is already set on line {}", kw.text, it->second));
  seen_.emplace(std::string(kw.text), kw.line);
}

// Declarations may come in any order, but a name must be declared before an expression uses it.
AttentionProgram Parser::parse_attention(const Token& name) {
  AttentionBuilder builder{std::string(name.text)};
  skip_newlines();
  while (!is(peek(), "}")) {
    const Token& kw = peek();
    if (is_word(kw, "buffer")) {
      builder.buffer(parse_buffer());
    } else if (is_word(kw, "param")) {
      builder.param(parse_param());
    } else if (is_word(kw, "mask") || is_word(kw, "score")) {
      once(next());
      expect("=", fmt::format("after '{}'", kw.text));
      if (kw.text == "mask")
        builder.mask(parse_value("mask", Type::Bool, {var::b, var::h, var::q, var::kv}));
      else
        builder.score(
            parse_value("score", Type::F32, {var::score, var::b, var::h, var::q, var::kv}));
    } else if (kw.kind == Tok::End) {
      fail(kw, fmt::format("expected '}}' to close attention '{}'", name.text));
    } else {
      fail(kw, fmt::format("expected a statement of an attention program (buffer, param, mask "
                           "or score), got {}",
                           describe(kw)));
    }
    end_statement();
  }
  next();
  try {
    return builder.build();
  } catch (const UserError& e) {
    fail(name, e.what());
  }
}

LossProgram Parser::parse_loss(const Token& name) {
  LossBuilder builder{std::string(name.text)};
  skip_newlines();
  while (!is(peek(), "}")) {
    const Token& kw = peek();
    if (kw.kind == Tok::End) fail(kw, fmt::format("expected '}}' to close loss '{}'", name.text));
    parse_loss_statement(kw, builder);
    end_statement();
  }
  next();
  for (const Segment& g : segments_) builder.segment(g.name, g.begin, g.end, g.weight, g.bias);
  if (kl_) builder.kl(kl_->first, kl_->second, teacher_);
  try {
    return builder.build();
  } catch (const UserError& e) {
    fail(name, e.what());
  }
}

void Parser::parse_loss_statement(const Token& kw, LossBuilder& builder) {
  if (is_word(kw, "buffer")) return (void)builder.buffer(parse_buffer());
  if (is_word(kw, "param")) return (void)builder.param(parse_param());
  if (is_word(kw, "segment")) {
    next();
    return segments_.push_back(parse_segment(segments_));
  }
  if (is_word(kw, "teacher")) {
    next();
    if (!kl_) fail(kw, "a teacher segment must follow the 'kl' line");
    expect_word("segment", "after 'teacher'");
    return teacher_.push_back(parse_segment(teacher_));
  }
  if (kw.kind != Tok::Ident)
    fail(kw, fmt::format("expected a statement of a loss program, got {}", describe(kw)));
  static constexpr std::string_view kOnce[] = {"logit", "label_smoothing", "z_loss",
                                               "kl",    "ignore_index",    "reduction"};
  if (std::find(std::begin(kOnce), std::end(kOnce), kw.text) == std::end(kOnce))
    fail(kw, fmt::format("expected a statement of a loss program (buffer, param, segment, "
                         "logit, label_smoothing, z_loss, kl, teacher segment, ignore_index or "
                         "reduction), got {}",
                         describe(kw)));
  once(next());
  if (kw.text == "kl") {
    expect_word("alpha", "after 'kl'");
    expect("=", "after 'alpha'");
    const Token& a = peek();
    double alpha = parse_f64();
    if (!(alpha >= 0 && alpha <= 1)) fail(a, "kl alpha must be in [0, 1]");
    expect_word("temperature", "after the kl alpha");
    expect("=", "after 'temperature'");
    const Token& t = peek();
    double temperature = parse_f64();
    if (!(temperature > 0 && std::isfinite(temperature)))
      fail(t, "kl temperature must be a finite number > 0");
    kl_.emplace(alpha, temperature);
    return;
  }
  expect("=", fmt::format("after '{}'", kw.text));
  const Token& v = peek();
  if (kw.text == "logit") {
    builder.logit(parse_value("logit", Type::F32, {var::logit, var::row, var::id}));
  } else if (kw.text == "label_smoothing") {
    double eps = parse_f64();
    if (!(eps >= 0 && eps < 1)) fail(v, "label_smoothing must be in [0, 1)");
    builder.label_smoothing(eps);
  } else if (kw.text == "z_loss") {
    double lambda = parse_f64();
    if (!(lambda >= 0 && std::isfinite(lambda))) fail(v, "z_loss must be a finite number >= 0");
    builder.z_loss(lambda);
  } else if (kw.text == "ignore_index") {
    builder.ignore_index(parse_i64());
  } else {
    const Token& r = expect_ident("a reduction (none, sum or mean)");
    if (r.text == "none")
      builder.reduction(Reduction::None);
    else if (r.text == "sum")
      builder.reduction(Reduction::Sum);
    else if (r.text == "mean")
      builder.reduction(Reduction::Mean);
    else
      fail(r, fmt::format("unknown reduction '{}' (expected none, sum or mean)", r.text));
  }
}

// NAME : [BEGIN, END) weight W [bias B], after `segment`; `before` is the layout so far.
Segment Parser::parse_segment(const std::vector<Segment>& before) {
  const Token& name = expect_ident("a segment name");
  for (const Segment& g : before)
    if (g.name == name.text) fail(name, fmt::format("segment '{}' is already declared", g.name));
  expect(":", "after the segment name");
  const Token& open = expect("[", "to open the segment's id range");
  const Token& b = peek();
  Segment s{std::string(name.text), parse_i64(), 0, "", ""};
  expect(",", "between the segment's first and end id");
  const Token& e = peek();
  s.end = parse_i64();
  expect(")", "to close the half-open id range [begin, end)");
  if (s.begin < 0) fail(b, "a segment's ids start at 0 or above");
  if (s.end > std::numeric_limits<int32_t>::max()) fail(e, "segment ids must fit in i32");
  if (s.end <= s.begin)
    fail(e, fmt::format("segment '{}' [{}, {}) is empty", s.name, s.begin, s.end));
  if (!before.empty() && before.back().end > s.begin) {
    const Segment& p = before.back();
    fail(open, fmt::format("segment '{}' [{}, {}) must start at or after the end of segment "
                           "'{}' [{}, {}): segments are sorted and disjoint",
                           s.name, s.begin, s.end, p.name, p.begin, p.end));
  }
  expect_word("weight", "after the segment's id range");
  s.weight = expect_ident("a weight name").text;
  if (is_word(peek(), "bias")) {
    next();
    s.bias = expect_ident("a bias name").text;
  }
  return s;
}

// [-] (NUMBER | inf | nan), for the loss terms.
double Parser::parse_f64() {
  bool negative = is(peek(), "-") && (next(), true);
  const Token& t = peek();
  double v = 0;
  if (is_word(t, "inf") || is_word(t, "nan")) {
    v = t.text == "inf" ? std::numeric_limits<double>::infinity()
                        : std::numeric_limits<double>::quiet_NaN();
  } else if (t.kind == Tok::Number) {
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (r.ec != std::errc()) fail(t, fmt::format("number '{}' is out of range", t.text));
  } else {
    fail(t, fmt::format("expected a number, got {}", describe(t)));
  }
  next();
  return negative ? -v : v;
}

// [-] INTEGER, for ids.
int64_t Parser::parse_i64() {
  bool negative = is(peek(), "-") && (next(), true);
  const Token& t = peek();
  if (t.kind != Tok::Number || t.text.find_first_of(".eE") != std::string_view::npos)
    fail(t, fmt::format("expected an integer, got {}", describe(t)));
  std::string digits = (negative ? "-" : "") + std::string(t.text);
  int64_t v = 0;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (r.ec != std::errc()) fail(t, fmt::format("integer '{}' is out of range", digits));
  next();
  return v;
}

// ---------------------------------------------------------------------------------------------
// Expressions: precedence climbing over the C operator table, every node built by apply() so
// promotion and type errors match the C++ DSL.

Expr Parser::parse_value(std::string_view stmt, Type want, std::vector<std::string_view> vars) {
  stmt_ = stmt;
  vars_ = std::move(vars);
  const Token& start = peek();
  Expr e = parse_expr();
  if (e.type() != want)
    fail(start,
         fmt::format("{} must be {}, but this expression is {}{}", stmt, type_name(want),
                     type_name(e.type()), want == Type::F32 ? " (convert with f32(...))" : ""));
  return e;
}

Expr Parser::parse_binary(int min_prec) {
  Expr lhs = parse_unary();
  for (;;) {
    const Token& t = peek();
    const BinaryOp* found = nullptr;
    if (t.kind == Tok::Punct)
      for (const BinaryOp& b : kBinary)
        if (b.spelling == t.text) found = &b;
    if (!found || found->prec < min_prec) return lhs;
    const Token& op = next();
    Expr rhs = parse_binary(found->prec + 1);  // left-associative
    lhs = apply_at(op, found->op, {lhs, rhs});
  }
}

Expr Parser::parse_unary() {
  struct Guard {
    int& n;
    ~Guard() { --n; }
  } guard{++nesting_};
  if (nesting_ > kMaxNesting)
    fail(peek(), fmt::format("expression is nested too deeply (more than {} levels)", kMaxNesting));
  const Token& t = peek();
  if (is(t, "-")) {
    const Token& after = peek(1);
    bool literal = after.kind == Tok::Number || is_word(after, "inf") || is_word(after, "nan");
    if (literal && after.offset == t.offset + 1) {  // "-1" is one literal, "- 1" a negation
      next();
      return parse_literal(next(), true);
    }
    next();
    return apply_at(t, Op::Neg, {parse_unary()});
  }
  if (is(t, "!")) {
    next();
    return apply_at(t, Op::Not, {parse_unary()});
  }
  return parse_primary();
}

Expr Parser::parse_primary() {
  const Token& t = peek();
  if (t.kind == Tok::Number) return parse_literal(next(), false);
  if (t.kind == Tok::Ident) return parse_name(next());
  if (is(t, "(")) {
    next();
    Expr e = parse_expr();
    expect(")", "to close '('");
    return e;
  }
  fail(t, fmt::format("expected an expression, got {}", describe(t)));
}

Expr Parser::parse_literal(const Token& t, bool negative) {
  if (t.kind == Tok::Ident) {  // inf, nan
    double v = t.text == "inf" ? std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::quiet_NaN();
    return ir::make_float(negative ? -v : v);
  }
  if (t.text.find_first_of(".eE") == std::string_view::npos) {
    int64_t v = 0;
    auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (negative) v = -v;
    if (r.ec != std::errc() || v < std::numeric_limits<int32_t>::min() ||
        v > std::numeric_limits<int32_t>::max())
      fail(t, fmt::format("integer literal {}{} does not fit in i32", negative ? "-" : "", t.text));
    return ir::make_int(v);
  }
  // Read straight into f32: reading a double first and rounding again could land on a
  // different f32 than the printer's shortest text meant.
  float f = 0;
  auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), f);
  if (r.ec != std::errc())
    fail(t, fmt::format("float literal {} is outside the f32 range (overflows or rounds to 0)",
                        t.text));
  double v = static_cast<double>(f);
  return ir::make_float(negative ? -v : v);
}

std::vector<Expr> Parser::parse_list(std::string_view close, std::string_view context,
                                     std::vector<Token>* starts) {
  std::vector<Expr> items;
  do {
    if (starts) starts->push_back(peek());
    items.push_back(parse_expr());
  } while (is(peek(), ",") && (next(), true));
  expect(close, context);
  return items;
}

Expr Parser::parse_name(const Token& t) {
  std::string_view n = t.text;
  if (n == "true" || n == "false") return ir::make_bool(n == "true");
  if (n == "inf" || n == "nan") return parse_literal(t, false);
  auto is_call = [&](std::string_view kind) {
    if (!is(peek(), "(")) fail(t, fmt::format("'{}' is a {}: write {}(...)", n, kind, n));
    next();
  };
  if (std::optional<Type> to = cast_type(n)) {
    is_call("cast");
    std::vector<Expr> args = parse_list(")", fmt::format("to close the cast {}(...)", n), nullptr);
    if (args.size() != 1) fail(t, fmt::format("a cast takes 1 argument, got {}", args.size()));
    return track(t, ir::make_cast(*to, args[0]));  // even a no-op cast stays, to round-trip
  }
  for (const Function& f : kFunctions) {
    if (f.name != n) continue;
    is_call("function");
    std::vector<Expr> args = parse_list(")", fmt::format("to close the call of '{}'", n), nullptr);
    if (static_cast<int>(args.size()) != op_arity(f.op))
      fail(t, fmt::format("'{}' takes {} argument{}, got {}", n, op_arity(f.op),
                          op_arity(f.op) == 1 ? "" : "s", args.size()));
    return apply_at(t, f.op, args);
  }
  if (std::find(vars_.begin(), vars_.end(), n) != vars_.end()) return ir::make_var(n);
  if (n == var::b || n == var::h || n == var::q || n == var::kv || n == var::row || n == var::id ||
      n == var::score || n == var::logit)
    fail(t, fmt::format("'{}' cannot be read in {} (it may read {})", n, stmt_,
                        fmt::join(vars_, ", ")));
  for (const ParamDecl& p : params_)
    if (p.name == n) return ir::make_param(n, p.type);
  for (const BufferDecl& b : buffers_) {
    if (b.name != n) continue;
    if (!is(peek(), "[")) fail(t, fmt::format("buffer '{}' is read with brackets: {}[...]", n, n));
    next();
    std::vector<Token> starts;
    std::vector<Expr> ix = parse_list("]", fmt::format("to close the indices of '{}'", n), &starts);
    if (ix.size() != b.dims.size())
      fail(t, fmt::format("buffer '{}' has {} dimension{} [{}] but is indexed with {}", n,
                          b.dims.size(), b.dims.size() == 1 ? "" : "s", fmt::join(b.dims, ", "),
                          ix.size()));
    for (size_t i = 0; i < ix.size(); ++i)
      if (ix[i].type() != Type::I32)
        fail(starts[i], fmt::format("index {} of buffer '{}' must be i32, got {}", i, n,
                                    type_name(ix[i].type())));
    return track(t, ir::make_load(n, value_type(b.elem), std::move(ix)));
  }
  fail(t, fmt::format("unknown name '{}'", n));
}

Expr Parser::apply_at(const Token& at, Op op, const std::vector<Expr>& args) {
  try {
    return track(at, apply(op, args));
  } catch (const ParseError&) {
    throw;
  } catch (const UserError& e) {
    fail(at, e.what());
  }
}

// Deep expressions are legal but printing and the passes recurse on them, so bound the depth.
Expr Parser::track(const Token& at, Expr e) {
  int d = 0;
  for (size_t i = 0; i < e.num_args(); ++i) {
    auto it = depth_.find(e.arg(i).get());
    d = std::max(d, it == depth_.end() ? 1 : it->second);
  }
  if (d + 1 > kMaxDepth)
    fail(at, fmt::format("expression is nested too deeply (more than {} levels)", kMaxDepth));
  depth_[e.get()] = d + 1;
  return e;
}

}  // namespace

ParsedProgram parse_program(std::string_view text, std::string_view filename) {
  Source src{text, std::string(filename)};
  return Parser(src).parse_file();
}

AttentionProgram parse_attention(std::string_view text, std::string_view filename) {
  ParsedProgram p = parse_program(text, filename);
  if (auto* a = std::get_if<AttentionProgram>(&p)) return std::move(*a);
  user_error("{}: expected an attention program, but '{}' is a loss program", filename,
             std::get<LossProgram>(p).name);
}

LossProgram parse_loss(std::string_view text, std::string_view filename) {
  ParsedProgram p = parse_program(text, filename);
  if (auto* l = std::get_if<LossProgram>(&p)) return std::move(*l);
  user_error("{}: expected a loss program, but '{}' is an attention program", filename,
             std::get<AttentionProgram>(p).name);
}

ParsedProgram load_program(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TILEJIT_USER_CHECK(in.good(), "cannot open program file '{}'", path);
  std::ostringstream text;
  text << in.rdbuf();
  TILEJIT_USER_CHECK(!in.bad(), "cannot read program file '{}'", path);
  return parse_program(text.str(), path);
}

}  // namespace tilejit
