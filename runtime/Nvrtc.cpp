#include "runtime/Nvrtc.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <memory>

namespace tilejit {

namespace {

void check_nvrtc(nvrtcResult result, const char* function, const std::string& program) {
  if (result == NVRTC_SUCCESS) return;
  internal_error("{} failed for {}: {}", function, program, nvrtcGetErrorString(result));
}

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// The options NVRTC receives: the caller's, then the target, then the defaults the caller did not
// set. Deterministic in the request, so the kernel-cache key (which hashes the request's options)
// still covers them.
std::vector<std::string> effective_options(const CompileRequest& request) {
  std::vector<std::string> options = request.options;
  options.push_back("--gpu-architecture=" + request.arch);
  bool has_std = std::any_of(options.begin(), options.end(), [](const std::string& o) {
    return starts_with(o, "-std=") || starts_with(o, "--std=");
  });
  if (!has_std) options.push_back("-std=c++17");
  // An #include must resolve to an in-memory header, never to a file next to the working
  // directory that happens to share the name.
  options.push_back("--no-source-include");
  return options;
}

void validate(const CompileRequest& request) {
  TILEJIT_USER_CHECK(!request.program_name.empty(), "a CUDA program needs a name");
  TILEJIT_USER_CHECK(starts_with(request.arch, "sm_"),
                     "program {}: target architecture '{}' is not a real GPU target (want e.g. "
                     "\"sm_80\" or \"sm_90a\")",
                     request.program_name, request.arch);
  for (const std::string& option : request.options) {
    TILEJIT_USER_CHECK(!starts_with(option, "-arch") && !starts_with(option, "--gpu-architecture"),
                       "program {}: pass the target as CompileRequest::arch, not as option '{}'",
                       request.program_name, option);
  }
}

struct ProgramDeleter {
  void operator()(nvrtcProgram* p) const {
    nvrtcDestroyProgram(p);
    delete p;
  }
};

std::string program_log(nvrtcProgram program, const std::string& name) {
  size_t size = 0;
  check_nvrtc(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize", name);
  std::string log(size, '\0');
  if (size > 0) check_nvrtc(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog", name);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

std::string number_lines(const std::string& source) {
  std::string out;
  std::string_view rest = source;
  for (int line = 1;; ++line) {
    size_t newline = rest.find('\n');
    if (newline == std::string_view::npos) {
      if (!rest.empty() || line == 1) out += fmt::format("{:>5} | {}\n", line, rest);
      return out;
    }
    out += fmt::format("{:>5} | {}\n", line, rest.substr(0, newline));
    rest.remove_prefix(newline + 1);
  }
}

CompileResult nvrtc_compile(const CompileRequest& request) {
  validate(request);
  const std::string& name = request.program_name;
  auto t0 = std::chrono::steady_clock::now();

  std::vector<const char*> header_names, header_sources;
  for (const auto& [header_name, content] : request.headers) {
    header_names.push_back(header_name.c_str());
    header_sources.push_back(content.c_str());
  }
  std::unique_ptr<nvrtcProgram, ProgramDeleter> program(new nvrtcProgram(nullptr));
  check_nvrtc(nvrtcCreateProgram(program.get(), request.source.c_str(), name.c_str(),
                                 static_cast<int>(header_names.size()), header_sources.data(),
                                 header_names.data()),
              "nvrtcCreateProgram", name);

  std::vector<std::string> options = effective_options(request);
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());
  nvrtcResult compiled =
      nvrtcCompileProgram(*program, static_cast<int>(option_ptrs.size()), option_ptrs.data());

  CompileResult result;
  result.log = program_log(*program, name);
  if (compiled == NVRTC_ERROR_COMPILATION) {
    throw CompileError(
        fmt::format("NVRTC could not compile {} for {}\noptions: {}\nlog:\n{}\nsource:\n{}", name,
                    request.arch, fmt::join(options, " "), result.log,
                    number_lines(request.source)),
        result.log);
  }
  check_nvrtc(compiled, "nvrtcCompileProgram", name);

  size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(*program, &cubin_size), "nvrtcGetCUBINSize", name);
  TILEJIT_INTERNAL_CHECK(cubin_size > 0, "NVRTC produced no cubin for {} on {}", name,
                         request.arch);
  result.cubin.resize(cubin_size);
  check_nvrtc(nvrtcGetCUBIN(*program, result.cubin.data()), "nvrtcGetCUBIN", name);

  if (request.want_ptx) {
    size_t ptx_size = 0;
    check_nvrtc(nvrtcGetPTXSize(*program, &ptx_size), "nvrtcGetPTXSize", name);
    result.ptx.assign(ptx_size, '\0');
    check_nvrtc(nvrtcGetPTX(*program, result.ptx.data()), "nvrtcGetPTX", name);
    while (!result.ptx.empty() && result.ptx.back() == '\0') result.ptx.pop_back();
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion", "(version query)");
  return fmt::format("{}.{}", major, minor);
}

}  // namespace tilejit
