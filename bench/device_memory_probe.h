// Device memory in use around a piece of work, measured with cuMemGetInfo (resolved from libcuda
// at run time, like runtime/Driver.h, which does not expose it). The library allocates with
// cuMemAlloc, or from its workspace pool (runtime/WorkspacePool.h), which the caller empties
// before measuring (trim_workspace_pool), so free memory seen by the driver is what it holds and
// what its pool has taken from the device since; a second thread samples it while the work runs, so scratch that
// lives only inside a call is caught as well as what the call returns holding. Device-wide: other
// processes on the GPU would show up too; granularity is the driver's page (2 MiB).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <functional>
#include <string>

namespace tilejit::bench {

class DeviceMemoryProbe {
 public:
  // Needs a driver and a current context (Driver::ensure_context); throws std::runtime_error
  // when libcuda has no cuMemGetInfo.
  DeviceMemoryProbe();

  size_t free_bytes() const;
  // The least free memory seen while `work` runs (it should synchronize before returning),
  // sampled continuously on a second thread, and right after it.
  size_t min_free_during(const std::function<void()>& work) const;

  static std::string method();  // how it measures, for the JSON rows

 private:
  using MemGetInfo = CUresult (*)(size_t* free, size_t* total);  // cuMemGetInfo_v2
  MemGetInfo mem_get_info_ = nullptr;
};

}  // namespace tilejit::bench
