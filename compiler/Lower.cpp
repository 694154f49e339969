#include "compiler/Lower.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "compiler/Differentiate.h"
#include "compiler/Error.h"
#include "compiler/Printer.h"
#include "compiler/Simplify.h"
#include "compiler/Validate.h"

namespace tilejit {

namespace {

// Runs one pass, timing it and dumping its result as the environment asks:
// TILEJIT_DUMP_IR names passes (comma-separated) or "all"; TILEJIT_TIME_PASSES=1 times them.
class PassRunner {
 public:
  explicit PassRunner(std::string_view program) : program_(program) {
    const char* dump = std::getenv("TILEJIT_DUMP_IR");
    dump_ = dump ? dump : "";
    const char* time = std::getenv("TILEJIT_TIME_PASSES");
    time_ = time && *time && std::string_view(time) != "0";
  }

  // `pass` returns the pass's result; `print` turns that result into text for a dump.
  template <typename Pass, typename Print>
  auto run(std::string_view name, Pass&& pass, Print&& print) {
    auto start = std::chrono::steady_clock::now();
    auto result = pass();
    std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - start;
    if (time_)
      fmt::print(stderr, "tilejit: pass {:<14} {:9.3f} ms  program '{}'\n", name, took.count(),
                 program_);
    if (dumps(name))
      fmt::print(stderr, "// tilejit: program '{}' after pass '{}'\n{}", program_, name,
                 print(result));
    return result;
  }

 private:
  bool dumps(std::string_view pass) const {
    std::string_view list = dump_;
    while (!list.empty()) {
      size_t comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      if (item == "all" || item == pass) return true;
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
    return false;
  }

  std::string program_;
  std::string dump_;
  bool time_ = false;
};

bool is_var(const Expr& e, std::string_view name) { return e.op() == Op::Var && e->name == name; }
bool is_float_const(const Expr& e, double v) { return e.op() == Op::ConstFloat && e->fval == v; }

// The derivative must itself be a valid expression of its program: a failure here is ours.
template <typename Program>
void check_derivative(Program p, Expr Program::*field, const Expr& grad) {
  p.*field = grad;
  try {
    validate(p);
  } catch (const UserError& e) {
    internal_error("the derivative is not a valid expression: {}", e.what());
  }
}

}  // namespace

LoweredAttention lower(const AttentionProgram& input) {
  PassRunner passes(input.name);
  auto dump = [](const AttentionProgram& p) { return print_program(p); };

  AttentionProgram program = passes.run(
      "validate",
      [&] {
        validate(input);
        return input;
      },
      dump);
  program = passes.run(
      "simplify", [&] { return simplify(program); }, dump);
  Expr score_grad = passes.run(
      "differentiate", [&] { return differentiate(program.score, var::score); },
      [&](const Expr& g) {
        return print_program(program) + "// score_grad = " + print_expr(g) + "\n";
      });
  check_derivative(program, &AttentionProgram::score, score_grad);

  LoweredAttention out;
  out.hash = program_hash(program);
  out.mask_is_true = program.mask.op() == Op::ConstBool && program.mask->ival != 0;
  out.mask_reads_buffers = ir::reads_buffers(program.mask);
  out.score_reads_buffers = ir::reads_buffers(program.score);
  out.score_is_identity = is_var(program.score, var::score);
  out.score_grad_is_one = is_float_const(score_grad, 1.0);
  out.score_grad = std::move(score_grad);
  out.program = std::move(program);
  return out;
}

LoweredLoss lower(const LossProgram& input) {
  PassRunner passes(input.name);
  auto dump = [](const LossProgram& p) { return print_program(p); };

  LossProgram program = passes.run(
      "validate",
      [&] {
        validate(input);
        return input;
      },
      dump);
  program = passes.run(
      "simplify", [&] { return simplify(program); }, dump);
  Expr logit_grad = passes.run(
      "differentiate", [&] { return differentiate(program.logit, var::logit); },
      [&](const Expr& g) {
        return print_program(program) + "// logit_grad = " + print_expr(g) + "\n";
      });
  check_derivative(program, &LossProgram::logit, logit_grad);

  LoweredLoss out;
  out.hash = program_hash(program);
  out.logit_reads_buffers = ir::reads_buffers(program.logit);
  out.logit_is_identity = is_var(program.logit, var::logit);
  out.logit_grad_is_one = is_float_const(logit_grad, 1.0);
  out.logit_grad = std::move(logit_grad);
  out.program = std::move(program);
  return out;
}

}  // namespace tilejit
