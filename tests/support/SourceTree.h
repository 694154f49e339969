// Where the tests find the files they read beside their binaries (example programs, golden
// files, kernel templates): the source tree they were built from, or TILEJIT_TEST_SOURCE_DIR
// where the binaries run on another host than the one that built them (bench/gpu_binaries.sh).
#pragma once

#include <cstdlib>
#include <string>

namespace tilejit::testing {

inline std::string source_dir() {
  const char* dir = std::getenv("TILEJIT_TEST_SOURCE_DIR");
  return dir != nullptr && *dir != '\0' ? std::string(dir) : std::string(TILEJIT_SOURCE_DIR);
}

inline std::string examples_dir() { return source_dir() + "/examples/programs"; }

}  // namespace tilejit::testing
