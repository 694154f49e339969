// Loaded modules: a CompiledKernel's cubin loaded into a CUDA context, its functions looked up.
// A kernel is loaded once per (cache key, context) and stays loaded for the process lifetime, so
// a kernel launched every step costs one map lookup.
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/KernelCache.h"

namespace tilejit {

class LoadedModule {
 public:
  LoadedModule(CUmodule module, CUcontext context, const CompiledKernel& kernel);
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  // The kernel `entry`, which must be one of the CompiledKernel's entry points.
  CUfunction function(const std::string& entry);
  // Allows `entry` to use up to `bytes` of dynamic shared memory (needed above 48 KiB).
  void set_max_dynamic_shared_memory(const std::string& entry, int bytes);

  CUmodule handle() const { return module_; }
  CUcontext context() const { return context_; }
  const std::string& key() const { return key_; }

 private:
  CUmodule module_;
  CUcontext context_;
  std::string key_, program_name_, variant_;
  std::vector<std::string> entry_points_;
  std::mutex mutex_;
  std::map<std::string, CUfunction> functions_;
  std::map<std::string, int> max_dynamic_shared_;
};

// The module of `kernel` in the current context, loaded on first use. Requires a driver and a
// current context (Driver::use_device).
std::shared_ptr<LoadedModule> load_module(const CompiledKernel& kernel);

}  // namespace tilejit
