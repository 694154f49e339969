#include "runtime/Launch.h"

#include <fmt/format.h>

#include <limits>

#include "runtime/Driver.h"
#include "runtime/LaunchTrace.h"

namespace tilejit {

std::string to_string(Dim3 d) { return fmt::format("({}, {}, {})", d.x, d.y, d.z); }

void launch(CUfunction function, Dim3 grid, Dim3 block, size_t shared_bytes, CUstream stream,
            void** params) {
  launch(function, grid, block, Dim3{}, shared_bytes, stream, params);
}

void launch(CUfunction function, Dim3 grid, Dim3 block, Dim3 cluster, size_t shared_bytes,
            CUstream stream, void** params) {
  TILEJIT_INTERNAL_CHECK(function != nullptr, "launch of a null CUfunction");
  TILEJIT_USER_CHECK(grid.x > 0 && grid.y > 0 && grid.z > 0, "kernel launch with an empty grid {}",
                     to_string(grid));
  TILEJIT_USER_CHECK(block.x > 0 && block.y > 0 && block.z > 0,
                     "kernel launch with an empty block {}", to_string(block));
  TILEJIT_USER_CHECK(cluster.x > 0 && cluster.y > 0 && cluster.z > 0 && grid.x % cluster.x == 0 &&
                         grid.y % cluster.y == 0 && grid.z % cluster.z == 0,
                     "kernel launch with grid {} in clusters of {}: not a whole number of clusters",
                     to_string(grid), to_string(cluster));
  TILEJIT_USER_CHECK(shared_bytes <= std::numeric_limits<unsigned>::max(),
                     "kernel launch asks for {} bytes of shared memory", shared_bytes);
  Driver* driver = Driver::get();
  TILEJIT_USER_CHECK(driver, "cannot launch a kernel: {}", Driver::unavailable_reason());
  const TracedLaunchScope traced(function, grid, stream);  // TILEJIT_LAUNCH_TRACE
  if (cluster.x * cluster.y * cluster.z == 1)
    driver->launch_kernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                          static_cast<unsigned>(shared_bytes), stream, params);
  else
    driver->launch_kernel_cluster(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                  cluster.x, cluster.y, cluster.z,
                                  static_cast<unsigned>(shared_bytes), stream, params);
}

}  // namespace tilejit
