// Parses a program with the installed headers and libraries and prints its identity hash.
#include <cstdio>
#include <string>

#include "compiler/Printer.h"
#include "dsl/TextForm.h"
#include "runtime/Nvrtc.h"
#include "runtime/Version.h"

int main() {
  tilejit::AttentionProgram program = tilejit::parse_attention(
      "attention causal {\n"
      "  mask = q >= kv\n"
      "}\n");
  std::printf("tilejit %s (NVRTC %s): %s %s\n", std::string(tilejit::version()).c_str(),
              tilejit::nvrtc_version().c_str(), program.name.c_str(),
              tilejit::program_hash(program).c_str());
  return 0;
}
