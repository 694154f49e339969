// Kernel launch through the driver API, with the launch configuration checked first so that a
// bad grid is reported as such rather than as an opaque driver error.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>

namespace tilejit {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

std::string to_string(Dim3 d);  // "(x, y, z)"

// Launches `function` on `stream` with `params` (one pointer per kernel argument). Throws
// UserError for an empty grid or block, CudaError when the driver refuses the launch.
void launch(CUfunction function, Dim3 grid, Dim3 block, size_t shared_bytes, CUstream stream,
            void** params);
// The same in thread block clusters of `cluster` CTAs (sm_90 and later): each grid dimension must
// be a multiple of the cluster's (UserError otherwise). A cluster of one CTA launches as above.
void launch(CUfunction function, Dim3 grid, Dim3 block, Dim3 cluster, size_t shared_bytes,
            CUstream stream, void** params);

}  // namespace tilejit
