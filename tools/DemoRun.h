// The run half of `tilejit demo` (tools/DemoRun.cpp).
#pragma once

namespace tilejit::cli {

// Runs the demo's attention and loss workloads on the GPU (gpu) or the CPU backend, printing
// results, errors against the fp64 reference and timings. Returns 0 when every check passes.
int run_demo_workloads(bool gpu, bool quick);

}  // namespace tilejit::cli
