// The CUDA driver API, opened at run time. tilejit never links libcuda: a host without a GPU
// (CI, a build machine) still compiles kernels with NVRTC, and Driver::get() just returns nullptr.
// Entry points are resolved with cuGetProcAddress at explicit ABI versions, because CUDA 13
// changed some signatures (cuCtxSynchronize takes a context since 13.0).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <string>
#include <utility>

#include "compiler/Error.h"

namespace tilejit {

// A driver call failed. The message names the call and the driver's error name and text.
class CudaError : public Error {
 public:
  CudaError(CUresult code, std::string function, const std::string& message)
      : Error(message), code_(code), function_(std::move(function)) {}
  CUresult code() const { return code_; }
  const std::string& function() const { return function_; }

 private:
  CUresult code_;
  std::string function_;
};

class Driver {
 public:
  // The process-wide driver, initialised on first use (thread-safe); nullptr when libcuda cannot
  // be opened, cuInit fails or there is no device. unavailable_reason() then says why.
  static Driver* get();
  static const std::string& unavailable_reason();

  int driver_version() const { return driver_version_; }  // e.g. 13000

  // Devices.
  int device_count();
  CUdevice device(int ordinal);
  int attribute(CUdevice_attribute attribute, int ordinal);
  std::string device_name(int ordinal);
  std::pair<int, int> compute_capability(int ordinal);

  // Contexts: the device's primary context, retained once and kept for the process lifetime.
  CUcontext primary_context(int ordinal);
  void set_current(CUcontext context);
  CUcontext current_context();   // nullptr when none is current
  int current_device();          // the ordinal of the current context's device
  void use_device(int ordinal);  // primary context of `ordinal` made current on this thread
  // What every runtime entry point does first: device 0's primary context made current on this
  // thread unless a context already is (the caller's own context is respected).
  void ensure_context();
  void context_synchronize();  // the current context

  // Modules and launches.
  CUmodule module_load_data(const void* image);
  void module_unload(CUmodule module);
  CUfunction module_function(CUmodule module, const char* name);
  void set_max_dynamic_shared_memory(CUfunction function, int bytes);
  void launch_kernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                     unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                     CUstream stream, void** params);
  // The same with a thread block cluster of (cluster_x, cluster_y, cluster_z) CTAs (each grid
  // dimension a multiple of the cluster's); needs cuLaunchKernelEx (UserError without it).
  void launch_kernel_cluster(CUfunction function, unsigned grid_x, unsigned grid_y,
                             unsigned grid_z, unsigned block_x, unsigned block_y, unsigned block_z,
                             unsigned cluster_x, unsigned cluster_y, unsigned cluster_z,
                             unsigned shared_bytes, CUstream stream, void** params);

  // Tensor maps (TMA descriptors, compute capability 9.0+): cuTensorMapEncodeTiled, checked
  // like every call; a UserError on a driver older than CUDA 12.0, which lacks it.
  void tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                               void* address, const cuuint64_t* dims, const cuuint64_t* strides,
                               const cuuint32_t* box, const cuuint32_t* element_strides,
                               CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                               CUtensorMapL2promotion l2_promotion,
                               CUtensorMapFloatOOBfill oob_fill);

  // Memory.
  CUdeviceptr mem_alloc(size_t bytes);
  void mem_free(CUdeviceptr ptr);
  // Memory pools (runtime/WorkspacePool.h keeps one per device). nullptr from the creation: the
  // device has no memory pools (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0, e.g. some
  // virtual GPUs). A pool allocation is usable by work enqueued on `stream` after it; its free
  // takes effect once the work enqueued on `stream` before the free is done, and the host waits
  // for nothing. What the pool holds beyond its release threshold goes back to the device at the
  // next synchronisation; mem_pool_trim hands back all but `keep_bytes` of what no allocation uses.
  CUmemoryPool mem_pool_create(int ordinal);
  void mem_pool_set_release_threshold(CUmemoryPool pool, uint64_t bytes);
  uint64_t mem_pool_reserved(CUmemoryPool pool);  // bytes the pool holds from the device
  uint64_t mem_pool_used(CUmemoryPool pool);      // ... of which allocations use
  void mem_pool_trim(CUmemoryPool pool, size_t keep_bytes);
  CUdeviceptr mem_alloc_from_pool_async(size_t bytes, CUmemoryPool pool, CUstream stream);
  void mem_free_async(CUdeviceptr ptr, CUstream stream);
  void memcpy_htod(CUdeviceptr dst, const void* src, size_t bytes);
  void memcpy_dtoh(void* dst, CUdeviceptr src, size_t bytes);
  // Copies ordered on `stream` (no other stream is waited for). From pageable host memory the
  // call returns once `src` is staged; into pageable host memory, once the data has landed
  // (synchronise `stream` before reading it where host memory may be mapped to the device).
  void memcpy_htod_async(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
  void memcpy_dtoh_async(void* dst, CUdeviceptr src, size_t bytes, CUstream stream);
  void memset_d8(CUdeviceptr dst, unsigned char value, size_t bytes);
  void memset_d32_async(CUdeviceptr dst, unsigned value, size_t count, CUstream stream);  // words
  // True when `ptr` is device (or managed) memory known to the driver; false for host memory.
  bool is_device_pointer(const void* ptr);

  // Streams and events.
  void stream_synchronize(CUstream stream);
  // A stream of the current context (CU_STREAM_DEFAULT: it synchronises with the legacy null
  // stream; CU_STREAM_NON_BLOCKING: it does not), and its destruction (its work still completes).
  CUstream stream_create(unsigned flags = CU_STREAM_DEFAULT);
  void stream_destroy(CUstream stream);
  CUevent event_create(unsigned flags = CU_EVENT_DEFAULT);
  void event_record(CUevent event, CUstream stream);
  // Waits on the host until the work before `event`'s last record has completed.
  void event_synchronize(CUevent event);
  // Work submitted to `stream` after this call waits for `event`'s last record (no host wait).
  void stream_wait_event(CUstream stream, CUevent event);
  float event_elapsed_ms(CUevent start, CUevent end);
  void event_destroy(CUevent event);

  // Throws CudaError naming `function` unless `result` is CUDA_SUCCESS.
  void check(CUresult result, const char* function) const;
  std::string error_text(CUresult result) const;

  struct EntryPoints;  // resolved function pointers (Driver.cpp)

 private:
  Driver() = default;
  static Driver* create(std::string& reason);

  EntryPoints* api_ = nullptr;
  int driver_version_ = 0;
};

// True when a driver and at least one device are present.
bool gpu_available();

// The NVRTC target for a compute capability: "sm_90a" for 9.0 (Hopper's wgmma/TMA need the
// arch-specific target), otherwise "sm_<major><minor>" ("sm_80", "sm_89", "sm_100").
std::string arch_for_compute_capability(int major, int minor);
// The target of device `ordinal` (requires a driver).
std::string device_arch(int ordinal);

}  // namespace tilejit
