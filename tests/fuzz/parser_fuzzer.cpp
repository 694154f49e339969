// libFuzzer target for the text-form parser. Any input may be rejected, but only with a
// UserError (ParseError included); anything else escaping is a crash. Whatever parses must
// print to text that parses back to the same program: same canonical text, same nodes.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "compiler/Printer.h"
#include "dsl/TextForm.h"

namespace {

using tilejit::ParsedProgram;

std::string print(const ParsedProgram& p) {
  return std::visit([](const auto& prog) { return tilejit::print_program(prog); }, p);
}

bool same_nodes(const ParsedProgram& a, const ParsedProgram& b) {
  if (a.index() != b.index()) return false;
  if (auto* x = std::get_if<tilejit::AttentionProgram>(&a)) {
    const auto& y = std::get<tilejit::AttentionProgram>(b);
    return x->mask.same_as(y.mask) && x->score.same_as(y.score);
  }
  return std::get<tilejit::LossProgram>(a).logit.same_as(std::get<tilejit::LossProgram>(b).logit);
}

[[noreturn]] void crash(const char* what, std::string_view input, const std::string& detail) {
  std::fprintf(stderr, "parser_fuzzer: %s\n--- input ---\n%.*s\n--- detail ---\n%s\n", what,
               static_cast<int>(input.size()), input.data(), detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<ParsedProgram> first;
  try {
    first = tilejit::parse_program(text, "fuzz.tj");
  } catch (const tilejit::UserError& e) {
    (void)e.what();
    return 0;
  }
  std::string printed = print(*first);
  std::optional<ParsedProgram> second;
  try {
    second = tilejit::parse_program(printed, "printed.tj");
  } catch (const tilejit::UserError& e) {
    crash("printed program does not parse", text, printed + "\n" + e.what());
  }
  std::string reprinted = print(*second);
  if (reprinted != printed)
    crash("print -> parse -> print changed the text", text, printed + "\n" + reprinted);
  if (!same_nodes(*first, *second)) crash("round trip changed expression nodes", text, printed);
  return 0;
}
