#include "runtime/WorkspacePool.h"

#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/Driver.h"
#include "runtime/Environment.h"

namespace tilejit {
namespace {

// TILEJIT_WORKSPACE_KEEP_MB: a whole number of MiB, at most 2^44; unset: keep everything.
uint64_t keep_bytes_from_environment() {
  const int64_t mb = env_integer("TILEJIT_WORKSPACE_KEEP_MB", 0, int64_t{1} << 44, -1);
  return mb < 0 ? std::numeric_limits<uint64_t>::max() : uint64_t(mb) << 20;
}

// The pool of device `ordinal`, created on first use; nullptr when the device has none. Pools
// live as long as the process (the driver reclaims them at exit).
CUmemoryPool pool_of(int ordinal) {
  static std::mutex mu;
  static std::unordered_map<int, CUmemoryPool> pools;
  std::lock_guard lock(mu);
  if (auto it = pools.find(ordinal); it != pools.end()) return it->second;
  static const uint64_t keep = keep_bytes_from_environment();  // before any pool exists
  Driver& d = *Driver::get();
  CUmemoryPool pool = d.mem_pool_create(ordinal);
  if (pool) d.mem_pool_set_release_threshold(pool, keep);
  pools.emplace(ordinal, pool);
  return pool;
}

CUmemoryPool current_pool() {
  Driver* d = Driver::get();
  if (!d || !d->current_context()) return nullptr;
  return pool_of(d->current_device());
}

}  // namespace

CUdeviceptr workspace_alloc(size_t bytes, CUstream stream) {
  Driver* d = Driver::get();
  TILEJIT_INTERNAL_CHECK(d, "workspace_alloc without a CUDA driver");
  CUmemoryPool pool = current_pool();
  return pool ? d->mem_alloc_from_pool_async(bytes, pool, stream) : 0;
}

void workspace_free(CUdeviceptr ptr, CUstream stream) {
  Driver::get()->mem_free_async(ptr, stream);
}

uint64_t workspace_pool_held_bytes() {
  CUmemoryPool pool = current_pool();
  return pool ? Driver::get()->mem_pool_reserved(pool) : 0;
}

uint64_t workspace_pool_in_use_bytes() {
  CUmemoryPool pool = current_pool();
  return pool ? Driver::get()->mem_pool_used(pool) : 0;
}

void trim_workspace_pool() {
  if (CUmemoryPool pool = current_pool()) Driver::get()->mem_pool_trim(pool, 0);
}

}  // namespace tilejit
