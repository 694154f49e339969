// What the loss products dE (linear_ce_dhidden.cuh) and dC (linear_ce_dweight.cuh) share: their
// CTA type (CeProductCtaOf: linear_ce_common.cuh's portable CeProductCta, or the Hopper
// CeProductWsCta) and how a persistent product CTA takes its items (ProductItems).
#pragma once

#include "ce_wgmma_items.cuh"
#include "linear_ce_corrections.cuh"

namespace tilejit_ce {

// The products' Hopper CTA: CeProductCta's shape (128 x 256 output tiles, K steps of 64) as two
// computing warpgroups of 64 x 256 (ce_wgmma.cuh: per K step and warpgroup 8 wgmma m64n128k16,
// two per k16 slice) and a loading one; used where the module asks for it (kSm90Loop) and is
// compiled for sm_90a. The operands are the portable loop's tiles, read in place:
//   dE = G . C:    A = G[128 rows][64 ids], K-major (load_kmajor); B = C[64 ids][256 dims],
//                  N-major (load_mnmajor, imm-trans-b).
//   dC = G^T . E:  A = G^T, stored as G[64 rows][128 ids], M-major (load_mnmajor, imm-trans-a);
//                  B = E[64 rows][256 dims], N-major (load_mnmajor, imm-trans-b).
// Thread (warpgroup g, warp w, lane 4q + t) holds output rows 64 g + 16 w + q + 8 h and columns
// 8 ni + 2 t (+ 1), ni < 32 (CeWgCta::row / col), which the epilogues read through acc_row /
// acc_col as they do the portable CTA's. Each output element is one thread's fp32 accumulator
// over the visited K steps in list order (within a k16 slice, the tensor core's fixed order):
// bit-identical run to run, no atomics; it differs from the portable loop's only by rounding.
// ptxas (CUDA 13.0, sm_90a, NVRTC products module of examples/programs/gemma2_softcap.tj): 168
// registers at launch (setmaxnreg 56 loading, 224 computing), no spills, no stack, no
// serialisation warning (the portable loop on sm_80: 211 and 222).
// On the Hopper loop the products run warp-specialised (CeWsCta, as the forward): a third
// warpgroup issues the copies into a four-stage ring (192 KiB) and the two computing ones only
// wait, multiply and release; 384 threads (the launch takes the CTA type's threads and memory).
typedef CeWsCta<CeProductCta::kM, CeProductCta::kN, 4> CeProductWsCta;
template <bool kSm90Loop>
struct CeProductCtaOf {
  typedef CeProductCta type;
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <>
struct CeProductCtaOf<true> {
  typedef CeProductWsCta type;
};
#endif

// The products' TMA boxes: CeBwdMaps (linear_ce_bwd.cuh).

// The items of a persistent product CTA, in the order its loading warp takes them (every lane
// calls next() alike): from CeBwdParams::item_counter, one ticket per call (lane 0's atomic,
// broadcast), so that CTAs whose items ran short take more and the launch ends together, as a CTA
// per item did; without a counter CTA c takes c, c + CTAs, ... Which CTA computes an item never
// changes its result.
struct ProductItems {
  int* counter;
  int next_static, ctas;
  __device__ explicit ProductItems(const CeBwdParams& p)
      : counter(p.item_counter),
        next_static(blockIdx.y * gridDim.x + blockIdx.x),
        ctas(gridDim.x * gridDim.y) {}
  __device__ __forceinline__ int next() {
    if (!counter) {
      const int item = next_static;
      next_static += ctas;
      return item;
    }
    int item = 0;
    if ((threadIdx.x & 31) == 0) item = atomicAdd(counter, 1);
    return __shfl_sync(0xffffffffu, item, 0);
  }
};

}  // namespace tilejit_ce
