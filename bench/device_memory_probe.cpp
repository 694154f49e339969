#include "bench/device_memory_probe.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>

#include "runtime/Driver.h"

namespace tilejit::bench {

DeviceMemoryProbe::DeviceMemoryProbe() {
  // The driver keeps libcuda open for the process lifetime; this only adds a reference.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* fn = library ? dlsym(library, "cuMemGetInfo_v2") : nullptr;
  if (!fn) throw std::runtime_error("libcuda.so.1 has no cuMemGetInfo_v2");
  mem_get_info_ = reinterpret_cast<MemGetInfo>(fn);
}

size_t DeviceMemoryProbe::free_bytes() const {
  size_t free = 0, total = 0;
  Driver::get()->check(mem_get_info_(&free, &total), "cuMemGetInfo");
  return free;
}

size_t DeviceMemoryProbe::min_free_during(const std::function<void()>& work) const {
  std::atomic<bool> done{false};
  std::atomic<size_t> least{free_bytes()};
  std::thread sampler([&] {
    Driver::get()->ensure_context();
    while (!done.load(std::memory_order_relaxed)) {
      size_t f = 0, total = 0;
      if (mem_get_info_(&f, &total) != CUDA_SUCCESS) continue;  // the main thread's call reports
      size_t seen = least.load(std::memory_order_relaxed);
      while (f < seen && !least.compare_exchange_weak(seen, f)) {
      }
    }
  });
  try {
    work();
  } catch (...) {
    done = true;
    sampler.join();
    throw;
  }
  done = true;
  sampler.join();
  return std::min(least.load(), free_bytes());
}

std::string DeviceMemoryProbe::method() {
  return "cuMemGetInfo: free before minus least free, sampled on a second thread during the "
         "calls (library scratch is cuMemAlloc, not cached)";
}

}  // namespace tilejit::bench
