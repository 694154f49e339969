// Hopper (sm_90a) tile loop of the linear cross-entropy kernels: the same cp.async producer and
// shared tiles as gemm_loop (ce_mma.cuh), consumed by warpgroup MMAs (wgmma.mma_async) instead
// of ldmatrix + mma.sync. ce_gemm_loop picks the loop from the CTA type, so a kernel body is
// written once against the accumulator interface of ce_mma.cuh (kMI, kNI, row, col, col_warp).
//
// Why the shared tiles need no change (wgmma.cuh for the descriptor layouts; 16-bit elements,
// every tile and 64-element panel starting on a 1024-byte boundary):
//   K-major tile (load_kmajor): tile row r holds 64 k (128 bytes) with 16-byte chunk c at chunk
//   c ^ (r % 8), rows 128 bytes apart. That is the 128-byte-swizzle K-major layout (8-row x
//   128-byte groups of 1024 bytes, the swizzle XORing address bits [4, 7) with [7, 10)): a
//   descriptor with stride byte offset 1024 (one 8-row group to the next), the leading offset
//   unused, reads an m64 (or n128) x k16 slice starting at its first row, 32 * (k / 16) bytes
//   into the rows; imm-trans 0.
//   MN-major tile (load_mnmajor): panel j (m or n 64j .. 64j + 63) is [64 k rows][64], 8192
//   bytes; k row r at 128 r within it, its 16-byte chunk c (m or n 64j + 8c ..) at chunk
//   c ^ (r % 8). That is the 128-byte-swizzle MN-major layout: 64 contiguous m / n per 128-byte
//   row, the next 64 m / n a leading byte offset of 8192 further (one panel to the next), k rows
//   128 bytes apart and 8-row groups a stride byte offset of 1024 apart; an m64 (or n128, two
//   panels) x k16 slice starts at its first panel, 2048 * (k / 16) bytes (16 k rows) into it;
//   imm-trans 1 (which wgmma takes for .bf16 / .f16).
// Tiles whose rows are contiguous can come by TMA instead (the warp-specialised loop's
// load_tma: the forward's hidden and unordered weight tiles); weight rows gathered through a
// vocabulary order stay cp.async, which a tensor map cannot express.
//
// CeWgCta: two warpgroups (256 threads), both producers and consumers. Warpgroup g owns tile
// rows [g M/2, (g+1) M/2) as M/128 m64 fragments, each a m64nNk16 product over every column
// (issued as N / 128 products of n128 on column groups [16 j, 16 j + 16) of the fragment):
// thread (warp w of its warpgroup, lane 4q + t) holds rows g M/2 + 64 mi + 16 w + q + 8 h and
// columns 8 ni + 2 t + {0, 1} (PTX ISA 9.7.15.5.1.1.1, the mma.m16n8 C fragment repeated over
// N / 8 column groups) -- the interface of ce_mma.cuh with every column in one warp (kWarpsN 1).
//
// Pipeline, per K step s (kStages stages, loads kStages - 1 steps ahead, as in gemm_loop):
//   wait for this thread's copies of step s, fence them into the async proxy, barrier (every
//   thread's copies of s visible); issue the 4 k16 x kMI x N / 128 products of s as one commit
//   group; wgmma.wait_group 1 (this warpgroup's products of step s - 1 are done); barrier (both
//   warpgroups' are); refill step s - 1's stage with step s + kStages - 1.
// So the tensor cores always hold the products of one step while the next is made ready, and the
// copies of the next stages overlap them. After the last step of an output tile the loop waits
// for every product and hands the accumulators to tile_done, whose work the copies already
// issued for the next tile overlap (as in gemm_loop); the next tile's first products overwrite
// them (scale-d 0).
//
// Needs: smem 1024-byte aligned (checked: a trap otherwise; the kernels using this loop declare
// their dynamic block __align__(1024), and ptxas pads any static shared memory before it to that
// alignment: `ptxas -v` reports the static size rounded up to 1024); compiled for sm_90a only
// (the kernels select CeWgCta under __CUDA_ARCH_FEAT_SM90_ALL).
#pragma once

#include "ce_mma.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace tilejit_ce {

template <int M, int N, int Stages>
struct CeWgCta {
  static_assert(M % 128 == 0 && N % 128 == 0, "two warpgroups of m64 fragments, n128 products");
  static constexpr bool kWgmma = true;
  static constexpr bool kWarpSpecialized = false;
  static constexpr int kM = M, kN = N, kK = 64, kStages = Stages;
  static constexpr int kThreads = 256, kWgRows = M / 2;
  static constexpr int kWarpsN = 1;
  static constexpr int kMI = kWgRows / 64, kNI = N / 8;
  static constexpr int kAElems = M * 64, kBElems = N * 64, kStageElems = kAElems + kBElems;
  static constexpr int kSmemBytes = kStages * kStageElems * 2;
  static_assert(kAElems * 2 % 1024 == 0 && kStageElems * 2 % 1024 == 0,
                "every tile starts a 128-byte swizzle pattern");
  typedef float Acc[kMI][kNI][4];

  static constexpr int kLoadThreads = kThreads, kComputeThreads = kThreads;
  __device__ static __forceinline__ int load_thread() { return threadIdx.x; }
  __device__ static __forceinline__ int col_warp() { return 0; }
  __device__ static __forceinline__ int row(int mi, int h) {
    return (threadIdx.x >> 7) * kWgRows + mi * 64 + ((threadIdx.x >> 5) & 3) * 16 + h * 8 +
           ((threadIdx.x & 31) >> 2);
  }
  __device__ static __forceinline__ int col(int ni) { return ni * 8 + (threadIdx.x & 3) * 2; }
};

// CeWsCta: CeWgCta's two compute warpgroups (threads 0-255, the same fragments) and a third,
// warpgroup 2, that only loads: its 128 threads issue the copies of every stage (cp.async, and
// TMA where the caller has a tensor map) into a kStages ring and hand each stage over on an
// mbarrier; the compute warpgroups wait for it, issue their products and release the stage on
// another (gemm_loop_sm90_ws, or gemm_loop_sm90_ws_joint for tiles in pairs). No barrier joins
// the two compute warpgroups inside the loop, and none of their issue slots go to copies.
template <int M, int N, int Stages>
struct CeWsCta : CeWgCta<M, N, Stages> {
  static constexpr bool kWarpSpecialized = true;
  static constexpr int kComputeThreads = 256, kLoadThreads = 128;
  static constexpr int kThreads = kComputeThreads + kLoadThreads;
  __device__ static __forceinline__ int load_thread() { return threadIdx.x - kComputeThreads; }
};

// Byte offsets of the shared tiles' layout (ce_mma.cuh): a row of 64 16-bit elements, a group of 8
// rows (one swizzle pattern), an MN-major panel of 64 k rows.
constexpr u32 kRowBytes = 128, kGroupBytes = 8 * kRowBytes, kPanelBytes = 64 * kRowBytes;

// Bytes that `count` m / n indices (a multiple of 64) span in a K-major tile (rows) or an MN-major
// one (panels).
template <bool kKMajor>
__device__ constexpr u32 span_bytes(int count) {
  return kKMajor ? count * kRowBytes : count / 64 * kPanelBytes;
}

// Descriptor of an operand tile at shared address `tile` (its first row when K-major, its first
// panel when MN-major), and the byte offset of the k16 slice kk of its block starting `block`
// bytes in: a product's descriptor is operand_descriptor(tile) advanced by operand_offset, one add
// (wgmma.cuh smem_descriptor_advance) on a descriptor built once per step.
template <bool kKMajor>
__device__ __forceinline__ unsigned long long operand_descriptor(u32 tile) {
  // K-major: the leading offset is unused (16 encodes 1)
  return tjk::smem_descriptor_sw128(tile, kKMajor ? 16 : kPanelBytes, kGroupBytes);
}
template <bool kKMajor>
__device__ constexpr u32 operand_offset(u32 block, int kk) {
  return block + (kKMajor ? kk * 32 : kk * 16 * kRowBytes);
}

// Column groups [first, first + kGroups) of a fragment accumulator, as the accumulator of one
// product over 8 kGroups columns (the same registers).
template <int kGroups, int kN>
__device__ __forceinline__ float (&column_groups(float (&acc)[kN][4], int first))[kGroups][4] {
  return *reinterpret_cast<float(*)[kGroups][4]>(&acc[first]);
}

template <bool kF16>
struct CeWgElem {
  typedef tjk::bf16 type;
};
template <>
struct CeWgElem<true> {
  typedef tjk::f16 type;
};

// The products of one K step of 64 on the stage at a_tile / b_tile (shared addresses), issued by
// this thread's warpgroup: acc[mi] = (accumulate ? acc[mi] : 0) + A[rows of fragment mi][64] .
// B[64][N], each operand K-major or MN-major (imm-trans 1) as its tile was loaded.
template <class Cta, bool kF16, bool kAKMajor, bool kBKMajor>
__device__ __forceinline__ void wgmma_step(typename Cta::Acc& acc, u32 a_tile, u32 b_tile,
                                           bool accumulate) {
  typedef typename CeWgElem<kF16>::type T;
  const u32 wg = tjk::warpgroup_index();
  const u32 a_rows =
      a_tile + (kAKMajor ? wg * Cta::kWgRows * kRowBytes : wg * (Cta::kWgRows / 64) * kPanelBytes);
  const unsigned long long a = operand_descriptor<kAKMajor>(a_rows);
  const unsigned long long b = operand_descriptor<kBKMajor>(b_tile);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int mi = 0; mi < Cta::kMI; ++mi)
#pragma unroll
      for (int nj = 0; nj < Cta::kN / 128; ++nj)
        tjk::Wgmma<128>::template ss<T, kAKMajor ? 0 : 1, kBKMajor ? 0 : 1>(
            column_groups<16>(acc[mi], nj * 16),
            tjk::smem_descriptor_advance(
                a, operand_offset<kAKMajor>(mi * span_bytes<kAKMajor>(64), kk)),
            tjk::smem_descriptor_advance(
                b, operand_offset<kBKMajor>(nj * span_bytes<kBKMajor>(128), kk)),
            kk > 0 || accumulate);
}

// Pins the accumulators at this point among the volatile asm (wgmma.cuh pin_registers): after a
// wait, code reading or resetting them is not hoisted above it; before an issue, nothing touching
// them is sunk below it.
template <class Acc>
__device__ __forceinline__ void pin_acc(Acc& acc) {
  constexpr int kMI = sizeof(acc) / sizeof(acc[0]);
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) tjk::pin_registers(acc[mi]);
}

// gemm_loop's contract (ce_mma.cuh) on Hopper, each operand K-major or MN-major as there:
// load(a_tile, b_tile, step) issues the cp.async copies of one step; after every `steps_per_tile`
// steps tile_done(tile index, acc) consumes the accumulators (it may overwrite them), which then
// restart at zero. One difference: after the last tile_done the accumulators keep what it left
// values (gemm_loop zeroes them); callers with several tiles read them only in tile_done. `smem`
// holds Cta::kSmemBytes, 1024-byte aligned.
template <class Cta, bool kF16, bool kAKMajor, bool kBKMajor, class Load, class TileDone>
__device__ __forceinline__ void gemm_loop_sm90(u16* smem, int steps, int steps_per_tile, Load load,
                                               TileDone tile_done, typename Cta::Acc& acc) {
  constexpr int S = Cta::kStages;
  const u32 smem_base = smem_addr(smem);
  if (smem_base & 1023) __trap();  // the swizzle the copies write is not the one wgmma reads
  zero_acc(acc);
  pipeline_prologue<Cta>(smem, steps, load);
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<S - 2>();
    tjk::fence_proxy_async_shared();  // wgmma reads shared memory through the async proxy
    __syncthreads();
    const u32 cur = smem_base + (step % S) * (Cta::kStageElems * 2);
    pin_acc(acc);
    tjk::wgmma_fence();
    // An output tile's first step overwrites the accumulators (scale-d 0) rather than having
    // them zeroed: no other instruction writes them while products may be in flight, which
    // would make ptxas serialise the products.
    wgmma_step<Cta, kF16, kAKMajor, kBKMajor>(acc, cur, cur + Cta::kAElems * 2,
                                              step % steps_per_tile != 0);
    tjk::wgmma_commit();
    tjk::wgmma_wait<1>();  // this warpgroup is done with step - 1's stage
    pin_acc(acc);
    __syncthreads();  // and so is the other
    const int next = step + S - 1;
    if (next < steps) {
      u16* st = smem + (next % S) * Cta::kStageElems;
      load(st, st + Cta::kAElems, next);
    }
    cp_async_commit();
    if ((step + 1) % steps_per_tile == 0) {
      tjk::wgmma_wait<0>();
      pin_acc(acc);
      tile_done(step / steps_per_tile, acc);
    }
  }
  tjk::wgmma_wait<0>();
  pin_acc(acc);
  cp_async_wait<0>();
  __syncthreads();
}

// gemm_loop_sm90_ws's default: no step skipped.
struct SkipNone {
  static constexpr bool kNever = true;
  __device__ __forceinline__ bool operator()(int) const { return false; }
};
// Steps skipped where f(step) says so.
template <class F>
struct SkipWhen {
  static constexpr bool kNever = false;
  F f;
  __device__ __forceinline__ bool operator()(int step) const { return f(step); }
};
template <class F>
__device__ __forceinline__ SkipWhen<F> skip_when(F f) {
  return {f};
}

// What loading thread 0 issues by TMA for a stage of a warp-specialised loop, before every loading
// thread's cp.async copies (`load`): called with the stage's A tile and full barrier (shared
// addresses) and the step, it arrives on the barrier once, with the bytes it expects. NoTmaLoad
// arrives without bytes (`load` then copies everything).
struct NoTmaLoad {
  __device__ __forceinline__ void operator()(u32, u32 full, int) const { tjk::mbar_arrive(full); }
};
template <class LoadTma>
struct LoadsByTma {  // whether a loop's load_tma copies anything (tma_only needs it to)
  static constexpr bool value = true;
};
template <>
struct LoadsByTma<NoTmaLoad> {
  static constexpr bool value = false;
};

// The stages of a warp-specialised loop's ring and their size (16-bit elements, a multiple of
// 512: every stage starts a swizzle pattern): Cta's unless the loop takes another
// (gemm_loop_sm90_ws_joint), never more than Cta::kStages stages of Cta::kSmemBytes in all.
struct RingShape {
  int stages, stage_elems;
};
template <class Cta>
__device__ constexpr RingShape ring_shape_of() {
  return {Cta::kStages, Cta::kStageElems};
}

// The ring's mbarriers of a warp-specialised loop (full[s] at full0 + 8 s, empty[s] at empty0 +
// 8 s), set up by thread 0 before the whole CTA (with cluster > 1: the whole cluster) meets:
// full[s] completes on every loading thread's arrival and one more (load_tma's), or on
// load_tma's alone when tma_only; empty[s] on every computing thread's (RingRelease), or with
// cluster > 1 on every computing warp's of every CTA of the cluster.
template <class Cta>
__device__ __forceinline__ void ws_ring_init(u32 full0, u32 empty0, bool tma_only,
                                             int cluster = 1) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cta::kStages; ++s) {
      tjk::mbar_init(full0 + 8 * s, tma_only ? 1 : Cta::kLoadThreads + 1);
      tjk::mbar_init(empty0 + 8 * s,
                     cluster == 1 ? Cta::kComputeThreads : cluster * (Cta::kComputeThreads / 32));
    }
    tjk::mbar_init_fence();
  }
  if (cluster == 1)
    __syncthreads();
  else
    tjk::cluster_sync();  // no CTA's copies or arrivals reach a peer's barriers before they exist
}

// How a computing thread hands stage s of the ring back once the products reading it are done:
// an arrival on its CTA's empty[s]. In a cluster whose CTAs fill each other's stages (cluster >
// 1: each loads a slice of every stage's A tile for all, tma_load_2d_multicast), a stage may be
// refilled only once every CTA's computing warps are done with it: each warp's first lane then
// arrives, after the whole warp, on empty[s] of every CTA of the cluster.
struct RingRelease {
  u32 empty0;
  int cluster;
  __device__ __forceinline__ void operator()(int s) const {
    if (cluster == 1) {
      tjk::mbar_arrive(empty0 + 8 * s);
      return;
    }
    __syncwarp();
    if ((threadIdx.x & 31) == 0)
      for (int r = 0; r < cluster; ++r) tjk::mbar_arrive_cluster(empty0 + 8 * s, r);
  }
};

// The loading warpgroup of a warp-specialised loop (gemm_loop_sm90_ws, gemm_loop_sm90_ws_joint):
// fills the ring's stages with steps 0 .. steps - 1 in order, each once its stage is empty.
// With cluster > 1 (the ring's stages filled by the cluster's CTAs together) its first thread
// then waits for the last ring.stages steps' releases, by every CTA of the cluster: no peer's
// arrival or copy reaches this CTA's shared memory after it exits.
template <class Cta, class Load, class LoadTma>
__device__ __forceinline__ void ws_load_ring(u16* smem, u32 full0, u32 empty0, int steps, Load load,
                                             LoadTma load_tma, bool tma_only, int cluster = 1,
                                             RingShape ring = ring_shape_of<Cta>()) {
  const int S = ring.stages;
  tjk::setmaxnreg_dec<56>();
  if (tma_only && !LoadsByTma<LoadTma>::value) __trap();  // no stage would ever be filled
  if (tma_only && Cta::load_thread() != 0) return;
  int s = 0, pass = 0;
  for (int step = 0; step < steps; ++step) {
    if (pass > 0) tjk::mbar_wait(empty0 + 8 * s, (pass - 1) & 1);
    u16* st = smem + s * ring.stage_elems;
    if (Cta::load_thread() == 0) load_tma(smem_addr(st), full0 + 8 * s, step);
    if (!tma_only) {
      load(st, st + Cta::kAElems, step);
      tjk::cp_async_mbar_arrive_noinc(full0 + 8 * s);
    }
    if (++s == S) s = 0, ++pass;
  }
  tjk::cp_async_wait_all();
  if (cluster > 1 && Cta::load_thread() == 0)
    for (int step = max(steps - S, 0); step < steps; ++step)
      tjk::mbar_wait(empty0 + 8 * (step % S), (step / S) & 1);
}

// One K step of a warp-specialised loop's computing warpgroup, once stage s is full: the stage's
// products into acc (accumulating unless `accumulate` is false: scale-d 0), then, once the
// previous step's products are done, that step's stage (`held`, -1: none) released; stage s is
// held from here on. Copies through the generic proxy need the fence before wgmma reads them
// (tma_only: TMA's don't).
template <class Cta, bool kF16, bool kAKMajor, bool kBKMajor>
__device__ __forceinline__ void ws_issue_step(typename Cta::Acc& acc, u32 smem_base,
                                              const RingRelease& release, int s, int& held,
                                              bool accumulate, bool tma_only) {
  if (!tma_only) tjk::fence_proxy_async_shared();
  const u32 cur = smem_base + s * (Cta::kStageElems * 2);
  pin_acc(acc);
  tjk::wgmma_fence();
  wgmma_step<Cta, kF16, kAKMajor, kBKMajor>(acc, cur, cur + Cta::kAElems * 2, accumulate);
  tjk::wgmma_commit();
  tjk::wgmma_wait<1>();  // the step before's products are done
  pin_acc(acc);
  if (held >= 0) release(held);
  held = s;
}

// gemm_loop_sm90's contract for a CeWsCta (launched with its 384 threads): load(a_tile, b_tile,
// step) runs on the loading warpgroup (Cta::load_thread() its index among Cta::kLoadThreads),
// after load_tma(a_tile, full, step) on its thread 0 (NoTmaLoad above), tile_done and the
// accumulators on the compute warpgroups. Returns true on the compute threads,
// after they have all left the ring (named barrier 1), false on the loading ones, which are done
// (the caller returns them: only the compute threads may meet at barriers afterwards, with
// Cta::kComputeThreads as the count).
//
// Per stage s two mbarriers (static shared memory): full[s] completes when every loading thread's
// copies of the stage have landed (cp.async.mbarrier.arrive.noinc: the arrival is the copies'
// completion, so a loader never waits for its own copies and keeps up to kStages steps in
// flight) and load_tma's arrival and bytes have; empty[s] when every compute thread has arrived
// after the products reading the stage completed. A compute warpgroup waits full[t % S] (pass
// t / S), fences the stage into the async proxy unless tma_only (wgmma reads shared memory
// through it; the copies wrote it through the generic one), issues step t's products (one commit
// group) and, once those of step t - 1 are done (wgmma_wait 1), releases step t - 1's stage; at
// the end of an output tile it waits for all, releases the stage and runs tile_done while the
// loaders fill the ring ahead. Stage, pass and position in the tile are counted, not divided.
// Registers: setmaxnreg 56 for the loaders (a gathered tile's rows stay in registers: 40
// spilled), 224 for the compute threads (56 * 128 + 224 * 256 = 168 * 384, what the launch
// allocated).
//
// tma_only (uniform over the CTA): load_tma brings every step's operands and `load` has nothing
// to copy. Then only the first loading thread runs the loop (full[s] waits for its one arrival)
// and the other 127 leave at once, rather than waiting on every stage and arriving on it: the
// loaders' per-step work slows the computing warps (the Gemma-2 forward under ncu: 16.5 ms with
// every loader in the loop, 14.7 ms with one), and the computing warps skip the proxy fence,
// which only copies through the generic proxy need.
//
// skip(step) (computing threads; SkipNone: never): whether this thread's warpgroup skips the
// step's products (its rows of A are zero there): it waits for the stage and releases it at
// once (and the stage of its last products, once they are done: the loader may need it before
// the warpgroup issues again). Only for a single output tile (steps_per_tile >= steps): a
// warpgroup that skips every step gets zero accumulators.
template <class Cta, bool kF16, bool kAKMajor, bool kBKMajor, class Load, class TileDone,
          class LoadTma = NoTmaLoad, class Skip = SkipNone>
__device__ __forceinline__ bool gemm_loop_sm90_ws(u16* smem, int steps, int steps_per_tile,
                                                  Load load, TileDone tile_done,
                                                  typename Cta::Acc& acc,
                                                  LoadTma load_tma = LoadTma(),
                                                  bool tma_only = false, Skip skip = Skip()) {
  constexpr int S = Cta::kStages;
  __shared__ __align__(8) unsigned long long ring_bars[2 * S];  // full[S], then empty[S]
  const u32 smem_base = smem_addr(smem);
  if (smem_base & 1023) __trap();  // the swizzle the copies write is not the one wgmma reads
  const u32 full0 = smem_addr(&ring_bars[0]), empty0 = smem_addr(&ring_bars[S]);
  ws_ring_init<Cta>(full0, empty0, tma_only);
  if (threadIdx.x >= Cta::kComputeThreads) {
    ws_load_ring<Cta>(smem, full0, empty0, steps, load, load_tma, tma_only);
    return false;
  }
  tjk::setmaxnreg_inc<224>();
  int s = 0, pass = 0, k = 0;  // stage, pass over the ring, step within the output tile
  int held = -1;               // the stage of the last step issued, still to be released
  bool issued = false;         // some step's products issued (Skip)
  for (int step = 0; step < steps; ++step) {
    tjk::mbar_wait(full0 + 8 * s, pass & 1);
    if constexpr (!Skip::kNever) {
      if (__shfl_sync(0xffffffffu, int(skip(step)), 0)) {  // warp-uniform
        if (held >= 0) {  // the loader may need it before this warpgroup issues again
          tjk::wgmma_wait<0>();
          pin_acc(acc);
          tjk::mbar_arrive(empty0 + 8 * held);
          held = -1;
        }
        tjk::mbar_arrive(empty0 + 8 * s);
        if (++s == S) s = 0, ++pass;
        continue;
      }
    }
    // An output tile's first step overwrites the accumulators (scale-d 0), as in gemm_loop_sm90.
    ws_issue_step<Cta, kF16, kAKMajor, kBKMajor>(acc, smem_base, RingRelease{empty0, 1}, s, held,
                                                 Skip::kNever ? k != 0 : issued, tma_only);
    issued = true;
    if (++k == steps_per_tile) {
      tjk::wgmma_wait<0>();
      pin_acc(acc);
      tjk::mbar_arrive(empty0 + 8 * s);
      held = -1;
      tile_done(step / steps_per_tile, acc);
      k = 0;
    }
    if (++s == S) s = 0, ++pass;
  }
  tjk::wgmma_wait<0>();
  pin_acc(acc);
  // Without a step nothing wrote the accumulators, which callers reading them after the loop
  // (the products) take as zero. (Zeroing them before the loop instead makes ptxas serialise the
  // products: a non-wgmma definition inside the pipeline.)
  if (Skip::kNever ? steps == 0 : !issued) zero_acc(acc);
  // Both compute warpgroups are done with the ring (a caller may reuse its shared memory).
  tjk::named_barrier_sync(1, Cta::kComputeThreads);
  return true;
}

// gemm_loop_sm90_ws for output tiles that come in pairs over the same A rows and K steps (a KL
// term's forward and gradient tiles: the student's logits of a vocabulary tile and the
// teacher's), both products of a pair issued at every K step: pair q's first tile accumulates
// into `first`, its second into `second`, and pair_done(q, first, second) runs once both are
// done. Both stay in registers from their products to pair_done; neither is copied (a copy inside
// the loop has ptxas move every accumulator at every step, and spill). A stage of Cta's ring holds
// one step of both: the first product's A tile (Cta::kM rows, K-major), the second's after it,
// then the first's B tile (Cta::kN rows, K-major) and the second's after it, which
// shares_b(q) (computing threads; true: the pair's products have the same B operand) leaves
// unloaded, both products then reading the first. Sharing B, a step moves three tiles for two
// products instead of four. `ring`: Cta's stages (room for four tiles each), or, where every pair
// shares B, more stages of three tiles each (Cta's shared memory holds either). Each tile
// `steps_per_tile` K steps; load, load_tma and tma_only as for gemm_loop_sm90_ws (load(a_tiles,
// b_tiles, step), load_tma(stage, full, step)); `smem` holds Cta's ring, 1024-byte aligned.
// Returns as gemm_loop_sm90_ws does (false on the loading threads). The ring's protocol is
// gemm_loop_sm90_ws's, one stage per K step of a pair.
// skip(q) (computing threads, uniform over a warpgroup; SkipNone: never): whether this thread's
// warpgroup skips both products of pair q (its rows of A are not wanted there): it waits for each
// stage and releases it at once, and pair_done(q, ...) gets accumulators holding stale values.
// cluster (uniform over the launch, the CTAs of a cluster dimension; 1: none): the cluster's CTAs
// fill each other's rings, load_tma bringing a slice of each stage's A tiles into all of them
// (tma_load_2d_multicast); every CTA of the cluster then runs as many pairs, a CTA with fewer of
// its own skipping the rest, and a stage is refilled once all are done with it (RingRelease).
template <class Cta, bool kF16, class Load, class PairDone, class SharesB, class LoadTma,
          class Skip = SkipNone>
__device__ __forceinline__ bool gemm_loop_sm90_ws_joint(u16* smem, int pairs, int steps_per_tile,
                                                        Load load, PairDone pair_done,
                                                        typename Cta::Acc& first,
                                                        typename Cta::Acc& second, SharesB shares_b,
                                                        RingShape ring, LoadTma load_tma,
                                                        bool tma_only = false, Skip skip = Skip(),
                                                        int cluster = 1) {
  static_assert(Cta::kWarpSpecialized, "a CeWsCta");
  static_assert(Cta::kAElems == 2 * Cta::kM * 64 && Cta::kBElems == 2 * Cta::kN * 64,
                "a stage holds both products' tiles");
  constexpr int S = Cta::kStages;  // the most stages (barriers)
  __shared__ __align__(8) unsigned long long ring_bars[2 * S];  // full[S], then empty[S]
  const u32 smem_base = smem_addr(smem);
  if (smem_base & 1023) __trap();  // the swizzle the copies write is not the one wgmma reads
  // A tile without a K step: nothing would write its accumulators. (Trapping only where pairs > 0
  // lets ptxas see K loops without a step, and it then serialises every product.)
  if (steps_per_tile <= 0) __trap();
  const u32 full0 = smem_addr(&ring_bars[0]), empty0 = smem_addr(&ring_bars[S]);
  ws_ring_init<Cta>(full0, empty0, tma_only, cluster);
  if (threadIdx.x >= Cta::kComputeThreads) {
    ws_load_ring<Cta>(smem, full0, empty0, pairs * steps_per_tile, load, load_tma, tma_only,
                      cluster, ring);
    return false;
  }
  tjk::setmaxnreg_inc<224>();
  const RingRelease release{empty0, cluster};
  const u32 stage_bytes = ring.stage_elems * 2;
  int s = 0, pass = 0, held = -1;  // stage, pass over the ring, the stage still to be released
  for (int q = 0; q < pairs; ++q) {
    const bool skipped = !Skip::kNever && __shfl_sync(0xffffffffu, int(skip(q)), 0);
    const u32 second_b = shares_b(q) ? 0 : Cta::kN * kRowBytes;  // from the first's B tile
    for (int k = 0; k < steps_per_tile; ++k) {
      tjk::mbar_wait(full0 + 8 * s, pass & 1);
      if (!Skip::kNever && skipped) {  // nothing issued: the stage goes back at once
        release(s);
        if (++s == ring.stages) s = 0, ++pass;
        continue;
      }
      if (!tma_only) tjk::fence_proxy_async_shared();
      const u32 a = smem_base + s * stage_bytes, b = a + Cta::kAElems * 2;
      pin_acc(first);
      pin_acc(second);
      tjk::wgmma_fence();
      wgmma_step<Cta, kF16, true, true>(first, a, b, k != 0);
      wgmma_step<Cta, kF16, true, true>(second, a + Cta::kM * kRowBytes, b + second_b, k != 0);
      tjk::wgmma_commit();
      tjk::wgmma_wait<1>();  // the step before's products are done
      pin_acc(first);
      pin_acc(second);
      if (held >= 0) release(held);
      held = s;
      if (++s == ring.stages) s = 0, ++pass;
    }
    tjk::wgmma_wait<0>();
    pin_acc(first);
    pin_acc(second);
    if (held >= 0) release(held);
    held = -1;
    pair_done(q, first, second);
  }
  // Both compute warpgroups are done with the ring (a caller may reuse its shared memory).
  tjk::named_barrier_sync(1, Cta::kComputeThreads);
  return true;
}

// The tile loop of CTA type Cta: gemm_loop_sm90_ws for a CeWsCta, gemm_loop_sm90 for a CeWgCta,
// gemm_loop otherwise. Returns false on threads that only load (CeWsCta), which are done. Only
// the warp-specialised loop calls load_tma; the others' `load` copies both operands.
template <class Cta, bool kF16, bool kAKMajor, bool kBKMajor, class Load, class TileDone,
          class LoadTma = NoTmaLoad, class Skip = SkipNone>
__device__ __forceinline__ bool ce_gemm_loop(u16* smem, int steps, int steps_per_tile, Load load,
                                             TileDone tile_done, typename Cta::Acc& acc,
                                             LoadTma load_tma = LoadTma(), bool tma_only = false,
                                             Skip skip = Skip()) {
  if constexpr (Cta::kWarpSpecialized) {
    return gemm_loop_sm90_ws<Cta, kF16, kAKMajor, kBKMajor>(
        smem, steps, steps_per_tile, load, tile_done, acc, load_tma, tma_only, skip);
  } else if constexpr (Cta::kWgmma) {
    gemm_loop_sm90<Cta, kF16, kAKMajor, kBKMajor>(smem, steps, steps_per_tile, load, tile_done,
                                                  acc);
  } else {
    gemm_loop<Cta, kF16, kAKMajor, kBKMajor>(smem, steps, steps_per_tile, load, tile_done, acc);
  }
  return true;
}

}  // namespace tilejit_ce
