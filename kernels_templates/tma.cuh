// Bulk tensor loads (TMA) and the synchronisation of warp-specialised kernels on sm_90a:
// transaction-counting mbarriers, named barriers between warpgroups and register reallocation.
// Device-only; compiles under NVRTC. The instructions exist on sm_90a only: callers guard their
// use with __CUDA_ARCH_FEAT_SM90_ALL (unreferenced inline functions emit no code elsewhere).
//
// PTX ISA sections relied on: 9.7.9.25.5.2 cp.async.bulk.tensor; 9.7.9.15 prefetch.tensormap;
// 9.7.13.15 mbarrier (init, arrive, expect-tx, try_wait.parity, phase completion); 9.7.13.4
// fence.mbarrier_init; 9.7.13.1 bar.sync / bar.arrive, barrier.cluster; 9.7.9.21 mapa;
// 9.7.19.5 setmaxnreg.
#pragma once

#include "mma.cuh"

namespace tjk {

// A CUtensorMap (cuda.h) without the host header: 128 opaque bytes, 64-byte aligned. Encoded on
// the host (runtime/AttentionTma.h) and passed as a __grid_constant__ kernel parameter, so its
// generic address points into parameter space as cp.async.bulk.tensor requires.
struct alignas(64) TmaDescriptor {
  unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned long long generic_address(const void* p) {
  return reinterpret_cast<unsigned long long>(p);
}

// Loads the descriptor into the tensor-map cache ahead of the first copy that uses it.
__device__ __forceinline__ void tma_prefetch_descriptor(const TmaDescriptor* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(generic_address(map)) : "memory");
}

// Copies the box at (c0, c1, c2, c3) (innermost first) of a 4-D tensor map into shared memory
// at `dst` and performs complete-tx of the box's byte size on the mbarrier at `bar` (elements
// outside the tensor are written as zeros and still counted).
__device__ __forceinline__ void tma_load_4d(unsigned dst, const TmaDescriptor* map, int c0, int c1,
                                            int c2, int c3, unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(dst),
      "l"(generic_address(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// Adds the box at `src` (shared memory, laid out as a load of the same box would write it) into
// the 4-D tensor map's box at (c0, c1, c2, c3), element-wise in the global memory's L2 (f32 add);
// elements outside the tensor are skipped. One bulk async-group per bulk_commit_group.
__device__ __forceinline__ void tma_reduce_add_4d(const TmaDescriptor* map, unsigned src, int c0,
                                                  int c1, int c2, int c3) {
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%2, %3, %4, %5}], [%1];" ::"l"(generic_address(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// Stores the box at `src` (shared memory, laid out as a load of the same box would write it) to
// the 4-D tensor map's box at (c0, c1, c2, c3); elements outside the tensor are skipped. As
// tma_store_2d below: the generic-proxy writes to `src` fenced first, one bulk async-group per
// bulk_commit_group.
__device__ __forceinline__ void tma_store_4d(const TmaDescriptor* map, unsigned src, int c0,
                                             int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
          generic_address(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until at most kPending of this thread's bulk groups still read their shared-memory
// source (the source may be overwritten then) ...
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
// ... or are still incomplete (their writes not yet performed).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;" ::"n"(kPending) : "memory");
}

// The same for the box at (c0, c1) of a 2-D tensor map.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDescriptor* map, int c0, int c1,
                                            unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(generic_address(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// tma_load_2d into every CTA of the cluster whose bit is set in `cta_mask` (by %cluster_ctarank):
// the box lands at `dst` in each one's shared memory, and each one's mbarrier at `bar` (the same
// offsets in every CTA) sees complete-tx of the box's bytes. One read of the box serves them all.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDescriptor* map,
                                                      int c0, int c1, unsigned bar,
                                                      unsigned short cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(generic_address(map)), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask)
      : "memory");
}

// Stores the box at `src` (shared memory, laid out as a load of the same box would write it) to
// the 2-D tensor map's box at (c0, c1) (elements outside the tensor are skipped); one bulk
// async-group per bulk_commit_group. The writes to `src` through the generic proxy must be made
// visible to the async proxy first (fence_proxy_async_shared, then a barrier).
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor* map, unsigned src, int c0,
                                             int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
          generic_address(map)),
      "r"(src), "r"(c0), "r"(c1)
      : "memory");
}

// mbarrier in shared memory (8 bytes, 8-byte aligned). A phase completes when `count` arrivals
// and every expected transaction byte have been seen; its parity is 0 for the first phase.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes initialised barriers visible to the other threads and to the async proxy (TMA); follow
// it with a CTA-wide barrier before any thread uses them.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also expects `bytes` more transaction bytes in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// An arrival on the mbarrier once every cp.async this thread issued before has completed
// (cp.async.mbarrier.arrive); with .noinc the arrival counts against the barrier's expected
// count, so the barrier must be initialised with it included.
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(unsigned bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Waits for every cp.async this thread issued, committed to a group or not.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;" ::: "memory");
}

// Waits until the phase of parity `parity` has completed. Valid for the current phase and the
// one before it: on a freshly initialised barrier, parity 1 (the phase "before" the first)
// reports complete at once, which is how a producer's first pass over an empty ring proceeds.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Thread block clusters (launched with a cluster dimension; a CTA launched without one is a
// cluster of its own). This CTA's rank in its cluster:
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster meets here; what each wrote before (its mbarriers'
// initialisation included, after mbar_init_fence) is visible to all after.
__device__ __forceinline__ void cluster_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// An arrival on the mbarrier at shared address `bar` of the cluster's CTA `rank` (the same offset
// as this CTA's), with the default semantics (release at CTA scope). What it orders is this
// CTA's completed wgmma reads of a stage before the peer's next TMA copy into it, both in the
// async proxy; release at cluster scope would add a GPU-wide memory barrier (MEMBAR.ALL.GPU) to
// every arrival.
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// A word of shared memory by its address: what one thread hands another under an mbarrier (the
// arrive releases it, the wait acquires it), without a 64-bit generic pointer to keep.
__device__ __forceinline__ void st_shared_u32(unsigned addr, int v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_shared_u32(unsigned addr) {
  int v;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

// Named barriers (ids 1..15; 0 is __syncthreads). `threads` counts every participant, those
// that only arrive included; it is a multiple of 32.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Register reallocation between warpgroups: every warp of a warpgroup executes the same one.
// The kernel's launch bounds fix the starting count (65536 / threads, rounded down to 8); the
// registers a warpgroup gives up are what the others can take.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace tjk
