// Fused linear cross-entropy, backward products: dE = G . C and dC = G^T . E per vocabulary
// chunk from G's blocks (linear_ce_bwd.cuh), dbias as G's column sums, each with the sparse
// target corrections of targets whose tile G does not hold.
//   linear_ce_dhidden  dE[row tile, d tile] (+)= G[row tile, chunk] . C[chunk, d tile]
//                      over the row tile's visited vocabulary tiles (the first chunk also adds
//                      the smoothing and target corrections);
//   linear_ce_dweight  dC[vocab tile, d tile] = G[:, vocab tile]^T . E[:, d tile] over
//                      the vocabulary tile's visited row tiles, then its target corrections
//                      (the tiles no row tile visits: linear_ce_dweight_cold, in
//                      linear_ce_corrections.cuh with the corrections);
//   linear_ce_dbias    column sums of G, plus target corrections.
// Every output element has exactly one writer and a fixed summation order: results are
// bit-identical run to run without atomics. Launch shapes: dhidden / dweight
// CeProductCtaOf<kSm90Loop>::type's (CeProductCta, or the warp-specialised CeProductWsCta where
// the module asks for the Hopper loop, ce_wgmma.cuh, with kSm90Loop and is compiled for sm_90a:
// 384 threads, 192 KiB). On the Hopper loop both are persistent (linear_ce_dhidden_items,
// linear_ce_dweight_items over ce_wgmma_items.cuh's gemm_loop_sm90_ws_items: any grid, one CTA
// per SM from the runtime); on the portable one a CTA per output tile. dE is fp32; dC fp32 or E's
// 16-bit type (CeSegment::d_weight_16, each entry rounded once); dE rows of ignored rows are
// zeroed by linear_ce_row_grad, every dC row and dbias entry is written by this pass.
// The parts: linear_ce_product_cta.cuh (the CTA types, the items of a persistent CTA),
// linear_ce_dhidden.cuh (dE), linear_ce_dweight.cuh (dC); dbias and the nvcc entry points here.
#pragma once

#include "linear_ce_dhidden.cuh"
#include "linear_ce_dweight.cuh"

namespace tilejit_ce {

// One thread per position of the chunk: dbias = column sum of G over visited row tiles (in
// order), plus the smoothing and target corrections.
template <bool kF16>
__device__ __forceinline__ void linear_ce_dbias(const CeBwdParams& p) {
  const CeLayout& L = p.layout;
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= p.chunk_tiles * kTileIds) return;
  int tile = p.chunk_first + c / kTileIds;
  const CeSegment& S = L.seg[tile_segment(L, tile)];
  int pos = (tile - S.first_tile) * kTileIds + c % kTileIds;
  if (!S.d_bias || pos >= S.size) return;
  int count = p.col_count[tile];
  float acc = 0.f;
  for (int i = 0; i < count; ++i) {
    const u16* g = p.grad + grad_block_row(chunk_block(p, tile, i), 0) + c % kTileIds;
    for (int r = 0; r < kTileRows; ++r) acc += to_float<kF16>(g[r * kTileIds]);
  }
  if (p.weight_colsum) acc -= p.uniform * p.grad_sum[0];
  if (p.target_grad) acc += target_bias_correction(p, tile * kTileIds + c % kTileIds);
  S.d_bias[seg_row(S, pos)] = acc;
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
template <bool kF16, bool kSm90Loop = false>
__global__ void __launch_bounds__(CeProductCtaOf<kSm90Loop>::type::kThreads, 1)
    linear_ce_dhidden_kernel(const __grid_constant__ CeBwdParams p,
                             const __grid_constant__ CeBwdMaps maps) {
  linear_ce_dhidden<kF16, kSm90Loop>(p, maps);
}
template <bool kF16, bool kSm90Loop = false>
__global__ void __launch_bounds__(CeProductCtaOf<kSm90Loop>::type::kThreads, 1)
    linear_ce_dweight_kernel(const __grid_constant__ CeBwdParams p,
                             const __grid_constant__ CeBwdMaps maps) {
  linear_ce_dweight<kF16, kSm90Loop>(p, maps);
}
template <bool kF16>
__global__ void linear_ce_dbias_kernel(const __grid_constant__ CeBwdParams p) {
  linear_ce_dbias<kF16>(p);
}
#endif

}  // namespace tilejit_ce
