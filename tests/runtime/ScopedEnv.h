// Sets an environment variable for one scope (the runtime reads its measuring settings at every
// call: runtime/Environment.h).
#pragma once

#include <stdlib.h>

namespace tilejit::test {

struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace tilejit::test
