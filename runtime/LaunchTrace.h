// Launch tracing, for diagnostics: where the GPU waits between kernels. Off unless the
// environment variable TILEJIT_LAUNCH_TRACE names a file. Then every tilejit::launch is bracketed
// by two events on its stream, markers can be placed between calls, and flush_launch_trace()
// synchronises the current context and appends one JSON line per launch or marker to the file:
//   {"kind": "kernel", "name": "tj_linear_ce_fwd_bf16_...", "grid": "(29, 500, 1)",
//    "start_ms": 12.345, "end_ms": 26.789}
//   {"kind": "marker", "name": "step 1", "start_ms": 40.1, "end_ms": 40.1}
// (GPU times from the first traced event). The events cost a few microseconds of host time per
// launch; timings taken while tracing are not the library's.
#pragma once

#include <cuda.h>

#include <string>

#include "runtime/Launch.h"

namespace tilejit {

// Whether launches are being traced (TILEJIT_LAUNCH_TRACE, read once, or start_launch_trace).
bool launch_trace_enabled();

// Traces from now on into `path` (appended to at each flush); an empty path stops tracing.
void start_launch_trace(const std::string& path);

// The name a launch of `function` is traced under (a module's entry point, when it is resolved).
void name_traced_function(CUfunction function, const std::string& name);

// Called by launch(): the events before and after one launch on `stream`.
struct TracedLaunchScope {
  TracedLaunchScope(CUfunction function, Dim3 grid, CUstream stream);
  ~TracedLaunchScope();
  TracedLaunchScope(const TracedLaunchScope&) = delete;
  TracedLaunchScope& operator=(const TracedLaunchScope&) = delete;

 private:
  int index_ = -1;  // in the trace; -1 when tracing is off
  CUstream stream_ = nullptr;
};

// A zero-length entry named `name` at this point of `stream`'s work (no-op when tracing is off).
void mark_launch_trace(const std::string& name, CUstream stream);

// Synchronises the current context, appends the entries traced so far to the file and forgets
// them. No-op when tracing is off.
void flush_launch_trace();

}  // namespace tilejit
