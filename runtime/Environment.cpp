#include "runtime/Environment.h"

#include <cctype>
#include <cstdlib>

#include "compiler/Error.h"

namespace tilejit {

int64_t env_integer(const char* name, int64_t lo, int64_t hi, int64_t unset) {
  const char* env = std::getenv(name);
  if (!env || !*env) return unset;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);  // (it skips leading spaces: refused below)
  TILEJIT_USER_CHECK(
      !std::isspace(static_cast<unsigned char>(*env)) && *end == 0 && v >= lo && v <= hi,
      "{} must be an integer from {} to {}, got '{}'", name, lo, hi, env);
  return v;
}

}  // namespace tilejit
