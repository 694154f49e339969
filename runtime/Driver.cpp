#include "runtime/Driver.h"

#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <vector>

namespace tilejit {

// Each pointer has the signature of the ABI version it was requested at (the PFN suffix).
struct Driver::EntryPoints {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDriverGetVersion_v2020 driver_get_version = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetCount_v2000 device_get_count = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuDeviceGetName_v2000 device_get_name = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
  PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
  // CUDA 13 gave cuCtxSynchronize a context argument; older drivers only have the void form.
  PFN_cuCtxSynchronize_v13000 ctx_synchronize_13 = nullptr;
  PFN_cuCtxSynchronize_v2000 ctx_synchronize_2 = nullptr;
  PFN_cuModuleLoadData_v2000 module_load_data = nullptr;
  PFN_cuModuleUnload_v2000 module_unload = nullptr;
  PFN_cuModuleGetFunction_v2000 module_get_function = nullptr;
  PFN_cuFuncSetAttribute_v9000 func_set_attribute = nullptr;
  PFN_cuLaunchKernel_v4000 launch_kernel = nullptr;
  PFN_cuMemAlloc_v3020 mem_alloc = nullptr;
  PFN_cuMemFree_v3020 mem_free = nullptr;
  PFN_cuMemPoolCreate_v11020 mem_pool_create = nullptr;
  PFN_cuMemPoolSetAttribute_v11020 mem_pool_set_attribute = nullptr;
  PFN_cuMemPoolGetAttribute_v11020 mem_pool_get_attribute = nullptr;
  PFN_cuMemPoolTrimTo_v11020 mem_pool_trim_to = nullptr;
  PFN_cuMemAllocFromPoolAsync_v11020 mem_alloc_from_pool_async = nullptr;
  PFN_cuMemFreeAsync_v11020 mem_free_async = nullptr;
  PFN_cuCtxGetDevice_v2000 ctx_get_device = nullptr;
  PFN_cuMemcpyHtoD_v3020 memcpy_htod = nullptr;
  PFN_cuMemcpyDtoH_v3020 memcpy_dtoh = nullptr;
  PFN_cuMemcpyHtoDAsync_v3020 memcpy_htod_async = nullptr;
  PFN_cuMemcpyDtoHAsync_v3020 memcpy_dtoh_async = nullptr;
  PFN_cuMemsetD8_v3020 memset_d8 = nullptr;
  PFN_cuMemsetD32Async_v3020 memset_d32_async = nullptr;
  PFN_cuPointerGetAttribute_v4000 pointer_get_attribute = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_synchronize = nullptr;
  PFN_cuStreamCreate_v2000 stream_create = nullptr;
  PFN_cuStreamDestroy_v4000 stream_destroy = nullptr;
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuEventSynchronize_v2000 event_synchronize = nullptr;
  PFN_cuStreamWaitEvent_v3020 stream_wait_event = nullptr;
  PFN_cuEventElapsedTime_v2000 event_elapsed_time = nullptr;
  PFN_cuEventDestroy_v4000 event_destroy = nullptr;
  PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encode_tiled = nullptr;  // optional (CUDA 12.0+)
  PFN_cuLaunchKernelEx_v11060 launch_kernel_ex = nullptr;                // optional (CUDA 11.6+)

  std::mutex contexts_mutex;
  std::vector<CUcontext> primary_contexts;  // by ordinal, retained on first use
};

namespace {

using GetProcAddress12 = PFN_cuGetProcAddress_v12000;
using GetProcAddress11 = PFN_cuGetProcAddress_v11030;

// Resolves driver symbols at explicit ABI versions through cuGetProcAddress.
class SymbolResolver {
 public:
  explicit SymbolResolver(void* library) {
    get12_ = reinterpret_cast<GetProcAddress12>(dlsym(library, "cuGetProcAddress_v2"));
    if (!get12_) get11_ = reinterpret_cast<GetProcAddress11>(dlsym(library, "cuGetProcAddress"));
  }
  bool ok() const { return get12_ || get11_; }

  // Empty when found, else why not.
  template <typename Fn>
  std::string resolve(Fn& out, const char* symbol, int version) {
    void* fn = nullptr;
    CUresult r;
    if (get12_) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      r = get12_(symbol, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
      if (r == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS) fn = nullptr;
    } else {
      r = get11_(symbol, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    }
    if (r != CUDA_SUCCESS || !fn) {
      return fmt::format("the driver has no {} at ABI version {} (cuGetProcAddress: {})", symbol,
                         version, static_cast<int>(r));
    }
    out = reinterpret_cast<Fn>(fn);
    return {};
  }

 private:
  GetProcAddress12 get12_ = nullptr;
  GetProcAddress11 get11_ = nullptr;
};

std::string& unavailable_reason_storage() {
  static std::string reason;
  return reason;
}

}  // namespace

Driver* Driver::create(std::string& reason) {
  // The library stays open for the process lifetime: function pointers outlive any owner.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* err = dlerror();
    reason = fmt::format("cannot open libcuda.so.1 ({}): no NVIDIA driver on this host",
                         err ? err : "unknown error");
    return nullptr;
  }
  SymbolResolver resolver(library);
  if (!resolver.ok()) {
    reason = "libcuda.so.1 exports no cuGetProcAddress: the driver is too old (CUDA 11.3+ needed)";
    return nullptr;
  }

  auto api = std::make_unique<EntryPoints>();
  // Resolve the few entry points needed to learn the driver version first.
  std::string why;
  auto need = [&](auto& out, const char* symbol, int version) {
    if (why.empty()) why = resolver.resolve(out, symbol, version);
  };
  need(api->get_error_name, "cuGetErrorName", 6000);
  need(api->get_error_string, "cuGetErrorString", 6000);
  need(api->init, "cuInit", 2000);
  need(api->driver_get_version, "cuDriverGetVersion", 2020);
  if (!why.empty()) {
    reason = why;
    return nullptr;
  }
  int driver_version = 0;
  if (CUresult r = api->driver_get_version(&driver_version); r != CUDA_SUCCESS) {
    reason = fmt::format("cuDriverGetVersion failed ({})", static_cast<int>(r));
    return nullptr;
  }

  need(api->device_get, "cuDeviceGet", 2000);
  need(api->device_get_count, "cuDeviceGetCount", 2000);
  need(api->device_get_attribute, "cuDeviceGetAttribute", 2000);
  need(api->device_get_name, "cuDeviceGetName", 2000);
  need(api->primary_ctx_retain, "cuDevicePrimaryCtxRetain", 7000);
  need(api->ctx_set_current, "cuCtxSetCurrent", 4000);
  need(api->ctx_get_current, "cuCtxGetCurrent", 4000);
  if (driver_version >= 13000) {
    need(api->ctx_synchronize_13, "cuCtxSynchronize", 13000);
  } else {
    need(api->ctx_synchronize_2, "cuCtxSynchronize", 2000);
  }
  need(api->module_load_data, "cuModuleLoadData", 2000);
  need(api->module_unload, "cuModuleUnload", 2000);
  need(api->module_get_function, "cuModuleGetFunction", 2000);
  need(api->func_set_attribute, "cuFuncSetAttribute", 9000);
  need(api->launch_kernel, "cuLaunchKernel", 4000);
  need(api->mem_alloc, "cuMemAlloc", 3020);
  need(api->mem_free, "cuMemFree", 3020);
  need(api->mem_pool_create, "cuMemPoolCreate", 11020);
  need(api->mem_pool_set_attribute, "cuMemPoolSetAttribute", 11020);
  need(api->mem_pool_get_attribute, "cuMemPoolGetAttribute", 11020);
  need(api->mem_pool_trim_to, "cuMemPoolTrimTo", 11020);
  need(api->mem_alloc_from_pool_async, "cuMemAllocFromPoolAsync", 11020);
  need(api->mem_free_async, "cuMemFreeAsync", 11020);
  need(api->ctx_get_device, "cuCtxGetDevice", 2000);
  need(api->memcpy_htod, "cuMemcpyHtoD", 3020);
  need(api->memcpy_dtoh, "cuMemcpyDtoH", 3020);
  need(api->memcpy_htod_async, "cuMemcpyHtoDAsync", 3020);
  need(api->memcpy_dtoh_async, "cuMemcpyDtoHAsync", 3020);
  need(api->memset_d8, "cuMemsetD8", 3020);
  need(api->memset_d32_async, "cuMemsetD32Async", 3020);
  need(api->pointer_get_attribute, "cuPointerGetAttribute", 4000);
  need(api->stream_synchronize, "cuStreamSynchronize", 2000);
  need(api->stream_create, "cuStreamCreate", 2000);
  need(api->stream_destroy, "cuStreamDestroy", 4000);
  need(api->event_create, "cuEventCreate", 2000);
  need(api->event_record, "cuEventRecord", 2000);
  need(api->event_synchronize, "cuEventSynchronize", 2000);
  need(api->stream_wait_event, "cuStreamWaitEvent", 3020);
  // 12.8 re-versioned cuEventElapsedTime with the same signature.
  need(api->event_elapsed_time, "cuEventElapsedTime", driver_version >= 12080 ? 12080 : 2000);
  need(api->event_destroy, "cuEventDestroy", 4000);
  if (!why.empty()) {
    reason = why;
    return nullptr;
  }
  // Optional: only the Hopper kernels need it, and they say so when it is missing.
  if (driver_version >= 12000)
    (void)resolver.resolve(api->tensor_map_encode_tiled, "cuTensorMapEncodeTiled", 12000);
  // Optional: only launches with a thread block cluster need it (sm_90 kernels).
  if (driver_version >= 11060)
    (void)resolver.resolve(api->launch_kernel_ex, "cuLaunchKernelEx", 11060);

  std::unique_ptr<Driver> driver(new Driver());
  driver->api_ = api.get();
  driver->driver_version_ = driver_version;
  if (CUresult r = driver->api_->init(0); r != CUDA_SUCCESS) {
    reason = fmt::format("cuInit failed: {}", driver->error_text(r));
    return nullptr;
  }
  int count = 0;
  if (CUresult r = driver->api_->device_get_count(&count); r != CUDA_SUCCESS || count == 0) {
    reason = r == CUDA_SUCCESS ? "the driver reports no CUDA device"
                               : fmt::format("cuDeviceGetCount failed: {}", driver->error_text(r));
    return nullptr;
  }
  driver->api_->primary_contexts.assign(count, nullptr);
  api.release();  // owned by the driver, which lives as long as the process
  return driver.release();
}

Driver* Driver::get() {
  static Driver* const instance = create(unavailable_reason_storage());
  return instance;
}

const std::string& Driver::unavailable_reason() {
  get();
  return unavailable_reason_storage();
}

std::string Driver::error_text(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api_->get_error_name(result, &name) != CUDA_SUCCESS || !name) name = "unknown CUresult";
  if (api_->get_error_string(result, &text) != CUDA_SUCCESS || !text) text = "no description";
  return fmt::format("{} ({}): {}", name, static_cast<int>(result), text);
}

void Driver::check(CUresult result, const char* function) const {
  if (result == CUDA_SUCCESS) return;
  throw CudaError(result, function, fmt::format("{} failed: {}", function, error_text(result)));
}

int Driver::device_count() { return static_cast<int>(api_->primary_contexts.size()); }

CUdevice Driver::device(int ordinal) {
  TILEJIT_USER_CHECK(ordinal >= 0 && ordinal < device_count(),
                     "CUDA device {} does not exist (this host has {})", ordinal, device_count());
  CUdevice dev = 0;
  check(api_->device_get(&dev, ordinal), "cuDeviceGet");
  return dev;
}

int Driver::attribute(CUdevice_attribute attribute, int ordinal) {
  int value = 0;
  check(api_->device_get_attribute(&value, attribute, device(ordinal)), "cuDeviceGetAttribute");
  return value;
}

std::string Driver::device_name(int ordinal) {
  char name[256] = {};
  check(api_->device_get_name(name, sizeof(name) - 1, device(ordinal)), "cuDeviceGetName");
  return name;
}

std::pair<int, int> Driver::compute_capability(int ordinal) {
  return {attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ordinal),
          attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ordinal)};
}

CUcontext Driver::primary_context(int ordinal) {
  CUdevice dev = device(ordinal);
  std::lock_guard lock(api_->contexts_mutex);
  CUcontext& ctx = api_->primary_contexts[ordinal];
  if (!ctx) check(api_->primary_ctx_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  return ctx;
}

void Driver::set_current(CUcontext context) {
  check(api_->ctx_set_current(context), "cuCtxSetCurrent");
}

int Driver::current_device() {
  CUdevice dev = 0;
  check(api_->ctx_get_device(&dev), "cuCtxGetDevice");
  for (int ordinal = 0; ordinal < device_count(); ++ordinal)
    if (device(ordinal) == dev) return ordinal;
  internal_error("cuCtxGetDevice gave a device ({}) that no ordinal has", static_cast<int>(dev));
}

CUcontext Driver::current_context() {
  CUcontext ctx = nullptr;
  check(api_->ctx_get_current(&ctx), "cuCtxGetCurrent");
  return ctx;
}

void Driver::use_device(int ordinal) { set_current(primary_context(ordinal)); }

void Driver::ensure_context() {
  if (!current_context()) use_device(0);
}

void Driver::context_synchronize() {
  if (api_->ctx_synchronize_13) {
    check(api_->ctx_synchronize_13(nullptr), "cuCtxSynchronize");  // nullptr: the current one
  } else {
    check(api_->ctx_synchronize_2(), "cuCtxSynchronize");
  }
}

CUmodule Driver::module_load_data(const void* image) {
  CUmodule module = nullptr;
  check(api_->module_load_data(&module, image), "cuModuleLoadData");
  return module;
}

void Driver::module_unload(CUmodule module) {
  check(api_->module_unload(module), "cuModuleUnload");
}

CUfunction Driver::module_function(CUmodule module, const char* name) {
  CUfunction fn = nullptr;
  check(api_->module_get_function(&fn, module, name), "cuModuleGetFunction");
  return fn;
}

void Driver::set_max_dynamic_shared_memory(CUfunction function, int bytes) {
  check(api_->func_set_attribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
}

void Driver::launch_kernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                           unsigned block_x, unsigned block_y, unsigned block_z,
                           unsigned shared_bytes, CUstream stream, void** params) {
  check(api_->launch_kernel(function, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                            shared_bytes, stream, params, nullptr),
        "cuLaunchKernel");
}

void Driver::launch_kernel_cluster(CUfunction function, unsigned grid_x, unsigned grid_y,
                                   unsigned grid_z, unsigned block_x, unsigned block_y,
                                   unsigned block_z, unsigned cluster_x, unsigned cluster_y,
                                   unsigned cluster_z, unsigned shared_bytes, CUstream stream,
                                   void** params) {
  TILEJIT_USER_CHECK(api_->launch_kernel_ex,
                     "the CUDA driver ({}) has no cuLaunchKernelEx: thread block clusters need a "
                     "CUDA 11.6 or newer driver",
                     driver_version_);
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = cluster_x;
  cluster.value.clusterDim.y = cluster_y;
  cluster.value.clusterDim.z = cluster_z;
  CUlaunchConfig config{};
  config.gridDimX = grid_x;
  config.gridDimY = grid_y;
  config.gridDimZ = grid_z;
  config.blockDimX = block_x;
  config.blockDimY = block_y;
  config.blockDimZ = block_z;
  config.sharedMemBytes = shared_bytes;
  config.hStream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  check(api_->launch_kernel_ex(&config, function, params, nullptr), "cuLaunchKernelEx");
}

void Driver::tensor_map_encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank,
                                     void* address, const cuuint64_t* dims,
                                     const cuuint64_t* strides, const cuuint32_t* box,
                                     const cuuint32_t* element_strides,
                                     CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                     CUtensorMapL2promotion l2_promotion,
                                     CUtensorMapFloatOOBfill oob_fill) {
  TILEJIT_USER_CHECK(api_->tensor_map_encode_tiled,
                     "the CUDA driver ({}) has no cuTensorMapEncodeTiled: tensor maps need a "
                     "CUDA 12.0 or newer driver",
                     driver_version_);
  check(api_->tensor_map_encode_tiled(map, type, rank, address, dims, strides, box, element_strides,
                                      interleave, swizzle, l2_promotion, oob_fill),
        "cuTensorMapEncodeTiled");
}

CUdeviceptr Driver::mem_alloc(size_t bytes) {
  CUdeviceptr ptr = 0;
  check(api_->mem_alloc(&ptr, bytes), "cuMemAlloc");
  return ptr;
}

void Driver::mem_free(CUdeviceptr ptr) { check(api_->mem_free(ptr), "cuMemFree"); }

CUmemoryPool Driver::mem_pool_create(int ordinal) {
  if (!attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, ordinal)) return nullptr;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device(ordinal);
  CUmemoryPool pool = nullptr;
  check(api_->mem_pool_create(&pool, &props), "cuMemPoolCreate");
  return pool;
}

void Driver::mem_pool_set_release_threshold(CUmemoryPool pool, uint64_t bytes) {
  check(api_->mem_pool_set_attribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &bytes),
        "cuMemPoolSetAttribute");
}

uint64_t Driver::mem_pool_reserved(CUmemoryPool pool) {
  uint64_t bytes = 0;
  check(api_->mem_pool_get_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &bytes),
        "cuMemPoolGetAttribute");
  return bytes;
}

uint64_t Driver::mem_pool_used(CUmemoryPool pool) {
  uint64_t bytes = 0;
  check(api_->mem_pool_get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &bytes),
        "cuMemPoolGetAttribute");
  return bytes;
}

void Driver::mem_pool_trim(CUmemoryPool pool, size_t keep_bytes) {
  check(api_->mem_pool_trim_to(pool, keep_bytes), "cuMemPoolTrimTo");
}

CUdeviceptr Driver::mem_alloc_from_pool_async(size_t bytes, CUmemoryPool pool, CUstream stream) {
  CUdeviceptr ptr = 0;
  check(api_->mem_alloc_from_pool_async(&ptr, bytes, pool, stream), "cuMemAllocFromPoolAsync");
  return ptr;
}

void Driver::mem_free_async(CUdeviceptr ptr, CUstream stream) {
  check(api_->mem_free_async(ptr, stream), "cuMemFreeAsync");
}

void Driver::memcpy_htod(CUdeviceptr dst, const void* src, size_t bytes) {
  check(api_->memcpy_htod(dst, src, bytes), "cuMemcpyHtoD");
}

void Driver::memcpy_dtoh(void* dst, CUdeviceptr src, size_t bytes) {
  check(api_->memcpy_dtoh(dst, src, bytes), "cuMemcpyDtoH");
}

void Driver::memcpy_htod_async(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream) {
  check(api_->memcpy_htod_async(dst, src, bytes, stream), "cuMemcpyHtoDAsync");
}

void Driver::memcpy_dtoh_async(void* dst, CUdeviceptr src, size_t bytes, CUstream stream) {
  check(api_->memcpy_dtoh_async(dst, src, bytes, stream), "cuMemcpyDtoHAsync");
}

void Driver::memset_d8(CUdeviceptr dst, unsigned char value, size_t bytes) {
  check(api_->memset_d8(dst, value, bytes), "cuMemsetD8");
}

void Driver::memset_d32_async(CUdeviceptr dst, unsigned value, size_t count, CUstream stream) {
  check(api_->memset_d32_async(dst, value, count, stream), "cuMemsetD32Async");
}

bool Driver::is_device_pointer(const void* ptr) {
  unsigned int type = 0;
  CUresult r = api_->pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                           reinterpret_cast<CUdeviceptr>(ptr));
  // Memory the driver has never seen (plain malloc) is reported as an invalid value.
  if (r == CUDA_ERROR_INVALID_VALUE) return false;
  check(r, "cuPointerGetAttribute(MEMORY_TYPE)");
  return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED;
}

void Driver::stream_synchronize(CUstream stream) {
  check(api_->stream_synchronize(stream), "cuStreamSynchronize");
}

CUstream Driver::stream_create(unsigned flags) {
  CUstream stream = nullptr;
  check(api_->stream_create(&stream, flags), "cuStreamCreate");
  return stream;
}

void Driver::stream_destroy(CUstream stream) {
  check(api_->stream_destroy(stream), "cuStreamDestroy");
}

CUevent Driver::event_create(unsigned flags) {
  CUevent event = nullptr;
  check(api_->event_create(&event, flags), "cuEventCreate");
  return event;
}

void Driver::event_record(CUevent event, CUstream stream) {
  check(api_->event_record(event, stream), "cuEventRecord");
}

void Driver::event_synchronize(CUevent event) {
  check(api_->event_synchronize(event), "cuEventSynchronize");
}

void Driver::stream_wait_event(CUstream stream, CUevent event) {
  check(api_->stream_wait_event(stream, event, 0), "cuStreamWaitEvent");
}

float Driver::event_elapsed_ms(CUevent start, CUevent end) {
  float ms = 0;
  check(api_->event_elapsed_time(&ms, start, end), "cuEventElapsedTime");
  return ms;
}

void Driver::event_destroy(CUevent event) { check(api_->event_destroy(event), "cuEventDestroy"); }

bool gpu_available() { return Driver::get() != nullptr; }

std::string arch_for_compute_capability(int major, int minor) {
  TILEJIT_USER_CHECK(major >= 8,
                     "compute capability {}.{} is not supported (sm_80 or newer needed)", major,
                     minor);
  if (major == 9 && minor == 0) return "sm_90a";
  return fmt::format("sm_{}{}", major, minor);
}

std::string device_arch(int ordinal) {
  Driver* driver = Driver::get();
  TILEJIT_USER_CHECK(driver, "no CUDA device: {}", Driver::unavailable_reason());
  auto [major, minor] = driver->compute_capability(ordinal);
  return arch_for_compute_capability(major, minor);
}

}  // namespace tilejit
