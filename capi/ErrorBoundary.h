// The C ABI's exception boundary: every tj_ function runs its body through `boundary`, which
// catches everything (tilejit's typed errors, std::bad_alloc, anything else), maps it to a
// tj_status and keeps the message for tj_last_error() on the calling thread.
//
// The status comes from the exception's type (ParseError -> TJ_ERR_PARSE, CompileError ->
// TJ_ERR_COMPILE, ...). A plain UserError means TJ_ERR_INVALID_ARGUMENT, except inside a
// `retag_user_errors` stage, where the call knows what a user error there means (a program
// that fails validation, a request the backend does not support).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "tilejit.h"

namespace tilejit::capi {

// An error raised by the C layer itself, with its status.
class CallError : public std::runtime_error {
 public:
  CallError(tj_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  tj_status status() const { return status_; }

 private:
  tj_status status_;
};

template <typename... Args>
[[noreturn]] void fail(tj_status status, fmt::format_string<Args...> f, Args&&... args) {
  throw CallError(status, fmt::format(f, std::forward<Args>(args)...));
}

// Rethrows a plain UserError raised by `body` as a CallError with `status`; errors of a more
// specific type (ParseError, OfflineMiss, ...) keep their own status.
void retag_current_user_error(tj_status status);
template <class F>
decltype(auto) retag_user_errors(tj_status status, F&& body) {
  try {
    return body();
  } catch (...) {
    retag_current_user_error(status);
    throw;
  }
}

// The status and message for the exception being handled (call only inside a catch block).
tj_status status_of_current_exception(std::string& message) noexcept;

// Clears the thread's message; records a failure's message, prefixed with the call
// ("tj_attention_forward [causal]: ...").
void clear_last_error() noexcept;
void set_last_error(std::string_view function, std::string_view program,
                    const std::string& message) noexcept;

// Runs `body` (returning void): TJ_OK, or the failure's status with its message recorded.
// `program` names the program the call works on ("" when none is known).
template <class F>
tj_status boundary(std::string_view function, std::string_view program, F&& body) noexcept {
  clear_last_error();
  try {
    body();
    return TJ_OK;
  } catch (...) {
    std::string message;
    tj_status status = status_of_current_exception(message);
    set_last_error(function, program, message);
    return status;
  }
}
template <class F>
tj_status boundary(std::string_view function, F&& body) noexcept {
  return boundary(function, std::string_view(), std::forward<F>(body));
}

}  // namespace tilejit::capi
