#include "ErrorBoundary.h"

#include <new>

#include "compiler/Error.h"
#include "dsl/TextForm.h"
#include "runtime/BundleIndex.h"
#include "runtime/Driver.h"
#include "runtime/Nvrtc.h"

namespace tilejit::capi {

namespace {

thread_local std::string t_last_error;
// Used when even the message could not be stored (out of memory).
thread_local const char* t_fallback = nullptr;

}  // namespace

void retag_current_user_error(tj_status status) {
  try {
    throw;
  } catch (const ParseError&) {
  } catch (const OfflineMiss&) {
  } catch (const BundleVersionMismatch&) {
  } catch (const UserError& e) {
    throw CallError(status, e.what());
  } catch (...) {
  }
}

tj_status status_of_current_exception(std::string& message) noexcept {
  try {
    try {
      throw;
    } catch (const CallError& e) {
      message = e.what();
      return e.status();
    } catch (const ParseError& e) {
      message = e.what();
      return TJ_ERR_PARSE;
    } catch (const OfflineMiss& e) {
      message = e.what();
      return TJ_ERR_OFFLINE_MISS;
    } catch (const BundleVersionMismatch& e) {
      message = e.what();
      return TJ_ERR_BUNDLE_MISMATCH;
    } catch (const UserError& e) {
      message = e.what();
      return TJ_ERR_INVALID_ARGUMENT;
    } catch (const CompileError& e) {
      message = e.what();
      return TJ_ERR_COMPILE;
    } catch (const CudaError& e) {
      message = e.what();
      return TJ_ERR_CUDA;
    } catch (const std::bad_alloc&) {
      message = "out of memory";
      return TJ_ERR_OUT_OF_MEMORY;
    } catch (const std::invalid_argument& e) {  // value types' own checks (BlockMask shapes)
      message = e.what();
      return TJ_ERR_INVALID_ARGUMENT;
    } catch (const std::exception& e) {  // InternalError and anything unexpected
      message = e.what();
      return TJ_ERR_INTERNAL;
    } catch (...) {
      message = "unknown exception";
      return TJ_ERR_INTERNAL;
    }
  } catch (...) {  // copying the message failed
    message.clear();
    return TJ_ERR_OUT_OF_MEMORY;
  }
}

void clear_last_error() noexcept {
  t_last_error.clear();
  t_fallback = nullptr;
}

void set_last_error(std::string_view function, std::string_view program,
                    const std::string& message) noexcept {
  try {
    t_last_error.assign(function);
    if (!program.empty()) t_last_error.append(" [").append(program).append("]");
    t_last_error += ": ";
    t_last_error += message.empty() ? std::string("out of memory") : message;
    t_fallback = nullptr;
  } catch (...) {
    t_fallback = "tilejit: out of memory while recording an error";
  }
}

}  // namespace tilejit::capi

extern "C" const char* tj_last_error(void) {
  using namespace tilejit::capi;
  return t_fallback ? t_fallback : t_last_error.c_str();
}

extern "C" const char* tj_status_name(tj_status status) {
  switch (status) {
    case TJ_OK: return "TJ_OK";
    case TJ_ERR_INVALID_ARGUMENT: return "TJ_ERR_INVALID_ARGUMENT";
    case TJ_ERR_PARSE: return "TJ_ERR_PARSE";
    case TJ_ERR_VALIDATION: return "TJ_ERR_VALIDATION";
    case TJ_ERR_COMPILE: return "TJ_ERR_COMPILE";
    case TJ_ERR_CUDA: return "TJ_ERR_CUDA";
    case TJ_ERR_UNSUPPORTED: return "TJ_ERR_UNSUPPORTED";
    case TJ_ERR_OFFLINE_MISS: return "TJ_ERR_OFFLINE_MISS";
    case TJ_ERR_BUNDLE_MISMATCH: return "TJ_ERR_BUNDLE_MISMATCH";
    case TJ_ERR_NO_DEVICE: return "TJ_ERR_NO_DEVICE";
    case TJ_ERR_OUT_OF_MEMORY: return "TJ_ERR_OUT_OF_MEMORY";
    case TJ_ERR_INTERNAL: return "TJ_ERR_INTERNAL";
  }
  return "TJ_ERR_UNKNOWN";
}
