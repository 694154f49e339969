// The `tilejit` command-line tool.
#include <cstdio>
#include <string>
#include <string_view>

#include "runtime/Version.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--version") {
    std::printf("tilejit %s\n", std::string(tilejit::version()).c_str());
    return 0;
  }
  std::fprintf(stderr, "usage: tilejit --version | compile | demo\n");
  return 2;
}
