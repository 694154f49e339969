// The ping-pong tile loop of the fused loss's gradient tiles on sm_90a (linear_ce_bwd.cuh): a
// persistent CTA whose two computing warpgroups take turns on the tensor cores over output tiles
// of their own, fed by a loading warpgroup through the ring of ce_wgmma.cuh's warp-specialised
// loops (the same mbarrier protocol). Compiled for sm_90a only, as ce_wgmma.cuh.
#pragma once

#include "ce_wgmma.cuh"

namespace tilejit_ce {

// CePingpongCta: a persistent warp-specialised CTA whose two computing warpgroups take turns on
// the tensor cores, each over output tiles of its own (M x N, M / 64 m64 fragments of n N per
// thread), so one warpgroup's epilogue runs while the other's products do; warpgroup 2 loads.
// Thread (warp w of its warpgroup, lane 4q + t) holds rows 64 mi + 16 w + q + 8 h and columns
// 8 ni + 2 t + {0, 1} of its warpgroup's tile (the interface of ce_mma.cuh, kWarpsN 1). Shared
// memory: the kStages ring of A [M][64] and B [N][64] K-major tiles (load_kmajor's layout), then
// one 16-bit M x N output tile per computing warpgroup for its epilogue.
template <int M, int N, int Stages>
struct CePingpongCta {
  static_assert(M % 64 == 0 && (N == 64 || N == 128 || N == 256), "m64 fragments, one n product");
  static constexpr bool kWgmma = true;
  static constexpr int kM = M, kN = N, kK = 64, kStages = Stages;
  static constexpr int kComputeGroups = 2, kComputeThreads = 256, kLoadThreads = 128;
  static constexpr int kThreads = kComputeThreads + kLoadThreads;
  static constexpr int kWarpsN = 1;
  static constexpr int kMI = M / 64, kNI = N / 8;
  static constexpr int kAElems = M * 64, kBElems = N * 64, kStageElems = kAElems + kBElems;
  static constexpr int kRingBytes = kStages * kStageElems * 2;
  static constexpr int kOutBytes = M * N * 2;  // a computing warpgroup's 16-bit output tile
  static constexpr int kSmemBytes = kRingBytes + kComputeGroups * kOutBytes;
  static_assert(kAElems * 2 % 1024 == 0 && kStageElems * 2 % 1024 == 0 && kOutBytes % 1024 == 0,
                "every tile starts a 128-byte swizzle pattern");
  typedef float Acc[kMI][kNI][4];

  __device__ static __forceinline__ int group() { return tjk::warpgroup_index(); }
  __device__ static __forceinline__ int row(int mi, int h) {
    return mi * 64 + ((threadIdx.x >> 5) & 3) * 16 + h * 8 + ((threadIdx.x & 31) >> 2);
  }
  __device__ static __forceinline__ int col(int ni) { return ni * 8 + (threadIdx.x & 3) * 2; }
};

// The products of one K step of 64 for this thread's warpgroup of a CePingpongCta, fence
// included: acc[mi] = (accumulate ? acc[mi] : 0) + A[64 mi ..][64] . B[64][N], both K-major at
// a_tile / b_tile, for the fragments mi in kFragments (bit mi; the others keep what they held).
template <class Cta, bool kF16, unsigned kFragments>
__device__ __forceinline__ void pingpong_step(typename Cta::Acc& acc, u32 a_tile, u32 b_tile,
                                              bool accumulate) {
  typedef typename CeWgElem<kF16>::type T;
  pin_acc(acc);
  tjk::wgmma_fence();
  const unsigned long long a = operand_descriptor<true>(a_tile);
  const unsigned long long b = operand_descriptor<true>(b_tile);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int mi = 0; mi < Cta::kMI; ++mi)
      if (kFragments >> mi & 1)  // constant once unrolled
        tjk::Wgmma<Cta::kN>::template ss<T, 0, 0>(
            acc[mi],
            tjk::smem_descriptor_advance(a, operand_offset<true>(mi * span_bytes<true>(64), kk)),
            tjk::smem_descriptor_advance(b, operand_offset<true>(0, kk)), kk > 0 || accumulate);
}

// Every m64 fragment of a tile (gemm_loop_sm90_pingpong's default).
struct AllFragments {
  __device__ __forceinline__ unsigned operator()(int) const { return ~0u; }
};

// A computing warpgroup's place in a CePingpongCta's ring: the shared addresses of the stages
// and barriers (gemm_loop_sm90_pingpong), the stage and pass of its next step, and the stage
// it holds (-1: none).
struct PingpongRing {
  u32 smem_base, full0, empty0, turn0;
  int s, pass, held;
};

// The K loop of one tile on computing warpgroup wg: `steps` steps of the fragments in kFragments,
// each waiting for its stage and releasing the one before; after issuing the last products it
// hands the turn to the other warpgroup. The last stage stays held (ring.held).
template <class Cta, bool kF16, unsigned kFragments>
__device__ __forceinline__ void pingpong_k_loop(typename Cta::Acc& acc, PingpongRing& ring,
                                                int steps, int wg) {
  constexpr u32 kStageBytes = Cta::kStageElems * 2;
  for (int k = 0; k < steps; ++k) {
    tjk::mbar_wait(ring.full0 + 8 * ring.s, ring.pass & 1);
    // A tile's first step overwrites the accumulators (scale-d 0), as in gemm_loop_sm90.
    const u32 cur = ring.smem_base + ring.s * kStageBytes;
    pingpong_step<Cta, kF16, kFragments>(acc, cur, cur + Cta::kAElems * 2, k != 0);
    tjk::wgmma_commit();
    if (k == steps - 1) tjk::mbar_arrive(ring.turn0 + 8 * (wg ^ 1));  // the other's turn
    tjk::wgmma_wait<1>();  // step k - 1's products are done
    pin_acc(acc);
    if (ring.held >= 0) tjk::mbar_arrive(ring.empty0 + 8 * ring.held);
    ring.held = ring.s;
    if (++ring.s == Cta::kStages) ring.s = 0, ++ring.pass;
  }
}

// The tile loop of a CePingpongCta (launched with its 384 threads), operands by TMA only: this
// CTA's output tiles 0 .. tiles - 1, each `steps` K steps. load_tma(stage, full, tile, step), on
// the first loading thread, fills the stage at shared address `stage` (A, then B at + kAElems * 2)
// and arrives on the mbarrier `full` once with the bytes it expects; tile_done(tile, acc) runs on
// the computing warpgroup that owns the tile (even tiles warpgroup 0, odd ones warpgroup 1).
// Returns true on the computing threads, false on the loading ones, which are done.
// fragments(tile) (computing threads, once per tile): the m64 fragments of the tile to compute
// (bit mi); the others' accumulators hold stale values for tile_done to ignore, and load_tma
// need not fill their rows of A.
//
// The ring (full[s] / empty[s], as gemm_loop_sm90_ws) is filled in tile order; a stage belongs to
// the warpgroup of its tile, which releases it once the products reading it are done. Turns:
// before the products of its next tile a warpgroup waits for turn[own], on which the other
// arrives once it has issued its last products of the tile before, so the warpgroups' product
// streams alternate, tile by tile, and each epilogue overlaps the other warpgroup's products.
// The turns also keep each full[s] wait within one phase of the barrier (a warpgroup starts a
// tile only after every stage of the tile before has landed), which mbar_wait requires.
// Registers: setmaxnreg 24 for the loaders, 240 for the computing threads (24 * 128 + 240 * 256
// = 168 * 384); ptxas (CUDA 13.0) still fits the computing code into the launch's 168.
template <class Cta, bool kF16, class LoadTma, class TileDone, class Fragments = AllFragments>
__device__ __forceinline__ bool gemm_loop_sm90_pingpong(u16* smem, int tiles, int steps,
                                                        LoadTma load_tma, TileDone tile_done,
                                                        Fragments fragments = Fragments()) {
  constexpr int S = Cta::kStages;
  constexpr u32 kStageBytes = Cta::kStageElems * 2;
  __shared__ __align__(8) unsigned long long ring_bars[2 * S + 2];  // full, empty, turn
  const u32 smem_base = smem_addr(smem);
  if (smem_base & 1023) __trap();  // the swizzle TMA writes is not the one wgmma reads
  if (steps <= 0) __trap();        // a tile without a K step: nothing would write acc
  const u32 full0 = smem_addr(&ring_bars[0]), empty0 = smem_addr(&ring_bars[S]),
            turn0 = smem_addr(&ring_bars[2 * S]);
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      tjk::mbar_init(full0 + 8 * s, 1);
      tjk::mbar_init(empty0 + 8 * s, 128);
    }
    tjk::mbar_init(turn0, 128);
    tjk::mbar_init(turn0 + 8, 128);
    tjk::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x >= Cta::kComputeThreads) {
    tjk::setmaxnreg_dec<24>();
    if (threadIdx.x != Cta::kComputeThreads) return false;
    int s = 0, pass = 0;
    for (int t = 0; t < tiles; ++t)
      for (int k = 0; k < steps; ++k) {
        if (pass > 0) tjk::mbar_wait(empty0 + 8 * s, (pass - 1) & 1);
        load_tma(smem_base + s * kStageBytes, full0 + 8 * s, t, k);
        if (++s == S) s = 0, ++pass;
      }
    return false;
  }
  tjk::setmaxnreg_inc<240>();
  const int wg = Cta::group();
  typename Cta::Acc acc;
  int turns = 0;
  for (int t = wg; t < tiles; t += 2) {
    const unsigned computed = __shfl_sync(0xffffffffu, fragments(t), 0);  // warp-uniform
    if (t > 0) tjk::mbar_wait(turn0 + 8 * wg, turns++ & 1);
    const long long first = (long long)t * steps;  // the tile's first step in the ring's order
    PingpongRing ring{
        smem_base, full0, empty0, turn0, static_cast<int>(first % S), static_cast<int>(first / S),
        -1};
    // One K loop per fragment set, so no product is issued under a runtime condition (ptxas
    // would fence every product then).
    if (Cta::kMI == 2 && (computed & 3) == 1)
      pingpong_k_loop<Cta, kF16, 1>(acc, ring, steps, wg);
    else if (Cta::kMI == 2 && (computed & 3) == 2)
      pingpong_k_loop<Cta, kF16, 2>(acc, ring, steps, wg);
    else
      pingpong_k_loop<Cta, kF16, ~0u>(acc, ring, steps, wg);
    tjk::wgmma_wait<0>();
    pin_acc(acc);
    tjk::mbar_arrive(empty0 + 8 * ring.held);
    tile_done(t, acc);
  }
  return true;
}

}  // namespace tilejit_ce
