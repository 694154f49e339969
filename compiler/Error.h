// Errors raised by tilejit. User errors (a bad program, a bad tensor, a bad option) and internal
// errors (a broken invariant inside tilejit) are different types, so callers and tests can tell
// "you asked for something wrong" from "tilejit is wrong".
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tilejit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller's fault: the message names the program, expression or tensor at fault.
class UserError : public Error {
 public:
  using Error::Error;
};

// tilejit's fault: an invariant was broken.
class InternalError : public Error {
 public:
  using Error::Error;
};

// A kernel was needed but is not in the cache and compiling is forbidden (TILEJIT_OFFLINE=1).
class OfflineMiss : public UserError {
 public:
  using UserError::UserError;
};

template <typename... Args>
[[noreturn]] void user_error(fmt::format_string<Args...> f, Args&&... args) {
  throw UserError(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void internal_error(fmt::format_string<Args...> f, Args&&... args) {
  throw InternalError("internal error: " + fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace tilejit

#define TILEJIT_USER_CHECK(cond, ...) \
  do {                                \
    if (!(cond)) ::tilejit::user_error(__VA_ARGS__); \
  } while (0)

#define TILEJIT_INTERNAL_CHECK(cond, ...) \
  do {                                    \
    if (!(cond)) ::tilejit::internal_error(__VA_ARGS__); \
  } while (0)
