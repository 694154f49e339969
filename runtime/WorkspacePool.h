// WorkspacePool: the library's own scratch in stream order (cuMemAllocFromPoolAsync /
// cuMemFreeAsync), from one memory pool per device that keeps what it holds between calls, as a
// caching allocator does. Neither end waits on the host: cuMemFree synchronises the whole device
// first, and what a pool hands back to the device it has to map again on the next allocation
// (about 1 ms for the 1.2 GB position-order weight copy of a Gemma-2 head, measured on the H200).
// A training step's scratch is then served from the previous step's.
//   TILEJIT_WORKSPACE_KEEP_MB (environment, read once): how much the pool keeps when the device
// synchronises (its release threshold); unset keeps everything. trim_workspace_pool() hands back
// now what no allocation holds, e.g. before work that needs the memory.
//   What keeping costs: a step's peak then includes what an earlier part of it freed and a later
// part did not reuse (the backward runs beside the pool's copy of the forward's position-order
// weights, reserved though freed), and the memory stays reserved between steps, invisible to
// other allocators (PyTorch's). An on_stream buffer is freed on the stream it was
// allocated on (DeviceBuffer.h): that stream must outlive it.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace tilejit {

// From the current context's device's pool, usable by work enqueued on `stream` from now on;
// 0 when that device has no memory pools (the caller allocates otherwise). Requires a driver.
CUdeviceptr workspace_alloc(size_t bytes, CUstream stream);
// Back to its pool once the work enqueued on `stream` before this call is done.
void workspace_free(CUdeviceptr ptr, CUstream stream);

// The current device's pool: the bytes it holds from the device, in use or kept (0 without a
// driver, a context or a pool).
uint64_t workspace_pool_held_bytes();
// ... of which allocations not yet freed (in stream order) use this many.
uint64_t workspace_pool_in_use_bytes();
// Hands back to the device what the current device's pool holds and no allocation uses.
void trim_workspace_pool();

}  // namespace tilejit
