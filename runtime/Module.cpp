#include "runtime/Module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "runtime/Driver.h"
#include "runtime/LaunchTrace.h"

namespace tilejit {

namespace {

Driver& driver() {
  Driver* d = Driver::get();
  TILEJIT_USER_CHECK(d, "loading a kernel needs a CUDA device: {}", Driver::unavailable_reason());
  return *d;
}

// Loaded modules by (cache key, context). Never destroyed: unloading at process exit races the
// driver's own teardown, and the driver frees everything when the process ends anyway.
struct ModuleRegistry {
  std::mutex mutex;
  std::map<std::pair<std::string, CUcontext>, std::shared_ptr<LoadedModule>> modules;
};

ModuleRegistry& registry() {
  static auto* r = new ModuleRegistry();
  return *r;
}

}  // namespace

LoadedModule::LoadedModule(CUmodule module, CUcontext context, const CompiledKernel& kernel)
    : module_(module),
      context_(context),
      key_(kernel.key),
      program_name_(kernel.program_name),
      variant_(kernel.variant),
      entry_points_(kernel.entry_points) {}

LoadedModule::~LoadedModule() {
  try {
    driver().module_unload(module_);
  } catch (const Error& e) {
    std::fprintf(stderr, "tilejit: warning: %s\n", e.what());
  }
}

CUfunction LoadedModule::function(const std::string& entry) {
  std::lock_guard lock(mutex_);
  if (auto it = functions_.find(entry); it != functions_.end()) return it->second;
  TILEJIT_INTERNAL_CHECK(
      std::find(entry_points_.begin(), entry_points_.end(), entry) != entry_points_.end(),
      "kernel {} ({}) has no entry point '{}' (it has: {})", program_name_, variant_, entry,
      fmt::join(entry_points_, ", "));
  CUfunction fn = driver().module_function(module_, entry.c_str());
  functions_.emplace(entry, fn);
  name_traced_function(fn, entry);
  return fn;
}

void LoadedModule::set_max_dynamic_shared_memory(const std::string& entry, int bytes) {
  CUfunction fn = function(entry);
  std::lock_guard lock(mutex_);
  int& current = max_dynamic_shared_[entry];
  if (current == bytes) return;  // launched every step: skip the driver call when unchanged
  driver().set_max_dynamic_shared_memory(fn, bytes);
  current = bytes;
}

std::shared_ptr<LoadedModule> load_module(const CompiledKernel& kernel) {
  Driver& d = driver();
  CUcontext context = d.current_context();
  TILEJIT_USER_CHECK(context, "loading kernel {} ({}): no CUDA context is current on this thread",
                     kernel.program_name, kernel.variant);
  ModuleRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  auto& slot = r.modules[{kernel.key, context}];
  if (!slot) {
    TILEJIT_INTERNAL_CHECK(!kernel.cubin.empty(), "kernel {} ({}) has an empty cubin",
                           kernel.program_name, kernel.variant);
    CUmodule module = d.module_load_data(kernel.cubin.data());
    slot = std::make_shared<LoadedModule>(module, context, kernel);
  }
  return slot;
}

}  // namespace tilejit
