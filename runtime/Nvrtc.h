// NVRTC: CUDA C++ source to a cubin (and PTX on request) for one target architecture.
// Headers come from memory only: NVRTC never reads the toolkit's include directory at run time,
// so a deployed host needs the NVRTC library and nothing else from the toolkit.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "compiler/Error.h"

namespace tilejit {

struct CompileRequest {
  std::string program_name;  // shown in errors and logs ("attention_fwd_doc_softcap.cu")
  std::string source;
  std::vector<std::pair<std::string, std::string>> headers;  // include name -> content
  std::vector<std::string> options;  // e.g. "-std=c++17", "-lineinfo"; never --use_fast_math
  std::string arch;                  // "sm_80", "sm_90a": a real target, so a cubin comes out
  bool want_ptx = false;
};

struct CompileResult {
  std::vector<char> cubin;
  std::string ptx;  // empty unless requested
  std::string log;  // NVRTC's log (warnings), may be empty
  double seconds = 0;
};

// NVRTC rejected the program. what() holds the program name, arch, options, the NVRTC log and
// the source with line numbers.
class CompileError : public Error {
 public:
  CompileError(const std::string& message, std::string log)
      : Error(message), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

// Throws CompileError when the source does not compile, UserError for a malformed request
// (no arch, a virtual "compute_" arch), InternalError when NVRTC itself fails.
CompileResult nvrtc_compile(const CompileRequest& request);

// NVRTC's version, "13.0": part of every kernel-cache key.
std::string nvrtc_version();

// The source with each line prefixed by its number, as compile errors show it.
std::string number_lines(const std::string& source);

}  // namespace tilejit
