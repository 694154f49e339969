// dE = G . C, the loss products' first (linear_ce_products.cuh): its launch order, its
// epilogue, the persistent Hopper loop and the portable one.
#pragma once

#include "linear_ce_product_cta.cuh"

namespace tilejit_ce {

// dE's launch order. The grid is (dim tiles, row tiles) and CTAs start in the order of
// blockIdx.y * gridDim.x + blockIdx.x, which this maps to groups of kDhiddenDimGroup dim tiles,
// the row tiles one after the other within a group and each row tile's dim tiles of the group
// side by side. A CTA reads its row tile's blocks of G and the dim tile's columns of the weights:
// the CTAs of one row tile running together share its blocks of G in L2 (the chunk's whole G, up
// to 512 MiB, cannot stay there), the row tiles running together share the weights' columns.
// Groups of 4 took dE's time on a Llama-3 state step 4% below groups of all 16 dim tiles (2
// and 8 within 1% of 4, 1 level with 16); dC showed no such difference.
struct ProductTile {
  int tile, dim_tile;
};
constexpr int kDhiddenDimGroup = 4;
__device__ __forceinline__ ProductTile dhidden_item(int id, int dim_tiles, int tiles) {
  const int first = id / (kDhiddenDimGroup * tiles) * kDhiddenDimGroup;
  const int width = min(kDhiddenDimGroup, dim_tiles - first);
  const int within = id - first * tiles;
  return {within / width, first + within % width};
}
__device__ __forceinline__ ProductTile dhidden_tile() {
  return dhidden_item(blockIdx.y * gridDim.x + blockIdx.x, gridDim.x, gridDim.y);
}

// The first index of ascending list[0, n) holding `value` or more, found by a warp (every lane
// gets it): each round reads 32 evenly spread entries and keeps the span between the last below
// `value` and the first not below, so a list of 1,024 takes two rounds (two load latencies).
__device__ __forceinline__ int warp_lower_bound(const int* list, int n, int value) {
  const int lane = threadIdx.x & 31;
  int lo = 0, hi = n;  // the answer lies in [lo, hi]
  while (lo < hi) {
    const int step = (hi - lo + 31) / 32, at = lo + lane * step;
    const bool below = at < hi && list[at] < value;
    const int c = __popc(__ballot_sync(0xffffffffu, below));  // sorted: a prefix of the lanes
    const int next_hi = min(hi, lo + c * step);
    lo = c > 0 ? lo + (c - 1) * step + 1 : lo;
    hi = next_hi;
  }
  return lo;
}

// dE's epilogue for the output tile (row tile rt, columns d0..) of a CTA type Cta: the chunk's
// products in acc, plus on the first chunk the smoothing term and the rows' target corrections
// (written), or added to what earlier chunks wrote. A later chunk adds with reductions done in
// L2 (atomic_add2), so its epilogue waits for no load: each entry gets one addition per launch
// (one item per output tile), in chunk order, so the sums are the same bits on every run.
// On the first chunk every load of a row's batch of entries is issued before the batch's first
// store: the compiler cannot tell the stores from the loads (the weights' column sums and rows),
// so a load placed after a store waits for it.
template <class Cta, bool kF16>
__device__ __forceinline__ void write_dhidden_tile(const CeBwdParams& p, int rt, int d0,
                                                   const typename Cta::Acc& acc) {
  // a thread's rows; its entries of a row loaded together
  constexpr int kRows = Cta::kMI * 2, kBatch = Cta::kNI < 16 ? Cta::kNI : 16;
  static_assert(Cta::kNI % kBatch == 0, "whole batches");
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  // The rows' destinations and first-chunk terms, all read before any store.
  float* dst[kRows];
  float gs[kRows], tg[kRows];
  const u16* ct[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int k = rt * kTileRows + acc_row<Cta>(r >> 1, r & 1);
    dst[r] = nullptr;
    gs[r] = tg[r] = 0.f;
    ct[r] = nullptr;
    if (k >= R.n_kept) continue;
    dst[r] = p.d_hidden + (long long)R.kept[k] * p.d_hidden_stride;
    if (!p.first_chunk) continue;
    if (p.weight_colsum) gs[r] = -p.row_grad[k] * p.uniform;
    // The row's target entry, when it is a sparse correction: dE_k += t_k C[target].
    if (p.target_grad && target_is_correction(p, k)) {
      ct[r] = slot_weight_row(L, p.target_slot[k]);
      tg[r] = p.target_grad[k];
    }
  }
  if (!p.first_chunk) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (!dst[r]) continue;
      const int mi = r >> 1, h = r & 1;
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni) {
        const int d = d0 + acc_col<Cta>(ni);
        if (d < R.dim) tjk::atomic_add2(dst[r] + d, acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);
      }
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (!dst[r]) continue;
    const int mi = r >> 1, h = r & 1;
#pragma unroll
    for (int n0 = 0; n0 < Cta::kNI; n0 += kBatch) {
      float2 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int ni = n0 + j, d = d0 + acc_col<Cta>(ni);
        v[j] = make_float2(acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);
        if (d >= R.dim) continue;
        if (gs[r] != 0.f) {
          v[j].x += gs[r] * p.weight_colsum[d];
          v[j].y += gs[r] * p.weight_colsum[d + 1];
        }
        if (ct[r]) {
          v[j].x += tg[r] * to_float<kF16>(ct[r][d]);
          v[j].y += tg[r] * to_float<kF16>(ct[r][d + 1]);
        }
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int d = d0 + acc_col<Cta>(n0 + j);
        if (d < R.dim) *reinterpret_cast<float2*>(dst[r] + d) = v[j];
      }
    }
  }
}

// dE on the Hopper loop, persistent: the items are the (row tile, dim tile) pairs in
// dhidden_tile's order, taken in that order (ProductItems); an item's K steps and operands are
// linear_ce_dhidden's (the chunk's visited tiles of the row tile, a warpgroup skipping the tiles
// whose half of G it holds is zero: the steps' tags say so). The loading warp finds the item's
// part of the row tile's list and its tiles' blocks, halves and weight boxes together (one lane
// per tile) while the computing warpgroups finish the item before. On the first chunk an item
// without a step still writes its rows (one stage that both warpgroups skip: zero products).
template <bool kF16>
__device__ __forceinline__ void linear_ce_dhidden_items(const CeBwdParams& p,
                                                        const CeBwdMaps& maps) {
  typedef CeProductWsCta Cta;
  extern __shared__ __align__(1024) u16 smem[];  // 1024: the swizzle patterns
  // The loading warp's view of its item's visited tiles: their blocks of G, computed halves and
  // weight boxes (the segment's map, or kMaxSegments for the staged rows, and the first row)
  __shared__ int blocks[1024];
  __shared__ unsigned char halves[1024];
  __shared__ unsigned char b_maps[1024];
  __shared__ int b_rows[1024];
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const int dim_tiles = (R.dim + Cta::kN - 1) / Cta::kN, row_tiles = p.num_row_tiles;
  const int items = dim_tiles * row_tiles;
  constexpr int kBothSkip = kTagSkipGroup | kTagSkipGroup << 1;

  auto load_items = [&](ItemRingLoader<Cta>& ring) {
    const int lane = threadIdx.x & 31;
    ProductItems taken(p);
    for (int item = taken.next(); item < items; item = taken.next()) {
      const ProductTile place = dhidden_item(item, dim_tiles, row_tiles);
      const int rt = place.tile, d0 = place.dim_tile * Cta::kN;
      const int* list = p.row_list + (long long)rt * L.num_tiles;
      const int n = p.row_count[rt];
      const int a = warp_lower_bound(list, n, p.chunk_first);
      const int count = warp_lower_bound(list, n, p.chunk_first + p.chunk_tiles) - a;
      if (count == 0) {
        if (p.first_chunk)  // no products, but the rows are written
          ring.push(item | kBothSkip | kTagLast, [](u32, u32 full) { tjk::mbar_arrive(full); });
        continue;
      }
      __syncwarp();  // lane 0 is done with the last item's entries
      for (int i = lane; i < count; i += 32) {
        const int tile = list[a + i];
        const int block = chunk_block(p, tile, p.pair_rank[(long long)rt * L.num_tiles + tile]);
        blocks[i] = block;
        halves[i] = pair_halves(p.pair_list[p.pair_first[p.chunk_first] + block].y);
        const int si = tile_segment(L, tile);
        const CeSegment& S = L.seg[si];
        const bool staged = staged_weights(S);
        b_maps[i] = staged ? kMaxSegments : si;
        b_rows[i] = (staged ? chunk_staged_tile(p, tile) : tile - S.first_tile) * kTileIds;
      }
      __syncwarp();
      for (int step = 0; step < 2 * count; ++step) {
        const int i = step >> 1, half = step & 1;
        const int skip =
            (halves[i] & 1 ? 0 : kTagSkipGroup) | (halves[i] & 2 ? 0 : kTagSkipGroup << 1);
        ring.push(item | skip | (step + 1 == 2 * count ? kTagLast : 0), [&](u32 a_tile, u32 full) {
          // G's 128 x 64 tile (two boxes) and the weights' 64 x 256 tile (four panels), as
          // linear_ce_dhidden's boxes
          tjk::mbar_arrive_expect_tx(full, (kTileRows + Cta::kN) * 128);
#pragma unroll
          for (int j = 0; j < kTileRows / 64; ++j)
            tjk::tma_load_2d(a_tile + j * 64 * 128, &maps.grad, half * 64,
                             blocks[i] * kTileRows + 64 * j, full);
          const u32 b_tile = a_tile + Cta::kAElems * 2;
          const int si = b_maps[i];
          const tjk::TmaDescriptor* b_map = si == kMaxSegments ? &maps.staged : &maps.weight[si];
#pragma unroll
          for (int j = 0; j < Cta::kN / 64; ++j)
            tjk::tma_load_2d(b_tile + j * 64 * 128, b_map, d0 + 64 * j, b_rows[i] + half * 64,
                             full);
        });
      }
    }
  };
  auto item_done = [&](int item, typename Cta::Acc& acc) {
    const ProductTile place = dhidden_item(item, dim_tiles, row_tiles);
    write_dhidden_tile<Cta, kF16>(p, place.tile, place.dim_tile * Cta::kN, acc);
  };
  typename Cta::Acc acc;
  gemm_loop_sm90_ws_items<Cta, kF16, true, false>(
      smem, load_items, [](int) {}, item_done, acc);
}

// Grid (ceil(dim / 256), row tiles), the portable loop (CeProductCta): dE for the chunk's visited
// tiles of this row tile, the CTAs in dhidden_tile's order.
template <bool kF16>
__device__ __forceinline__ void linear_ce_dhidden_tile(const CeBwdParams& p) {
  typedef CeProductCta Cta;
  extern __shared__ __align__(1024) u16 smem[];
  __shared__ int tiles[1024];   // the chunk's visited tiles of this row tile, in order
  __shared__ int blocks[1024];  // ... their blocks of G
  __shared__ int range[2];
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const ProductTile place = dhidden_tile();
  const int rt = place.tile, d0 = place.dim_tile * Cta::kN;
  const int* list = p.row_list + (long long)rt * L.num_tiles;
  if (threadIdx.x < 32) {  // the chunk's part of the ascending list
    const int n = p.row_count[rt];
    const int a = warp_lower_bound(list, n, p.chunk_first);
    const int b = warp_lower_bound(list, n, p.chunk_first + p.chunk_tiles);
    if (threadIdx.x == 0) range[0] = a, range[1] = b;
  }
  __syncthreads();
  const int a = range[0], count = range[1] - range[0];
  if (count == 0 && !p.first_chunk) return;
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const int tile = list[a + i];
    tiles[i] = tile;
    blocks[i] = chunk_block(p, tile, p.pair_rank[(long long)rt * L.num_tiles + tile]);
  }
  __syncthreads();

  auto load = [&](u16* a_tile, u16* b_tile, int step) {
    int tile = tiles[step >> 1], half = step & 1;
    const CeSegment& S = L.seg[tile_segment(L, tile)];
    int pos0 = (tile - S.first_tile) * kTileIds + half * 64;
    load_kmajor<kTileRows, Cta::kLoadThreads>(
        a_tile,
        CeOperand{p.grad + grad_block_row(blocks[step >> 1], 0) + half * 64, kTileIds, kTileRows,
                  64},
        Cta::load_thread());
    load_mnmajor<Cta::kN, Cta::kLoadThreads>(b_tile, weight_rows(S, pos0, d0, R.dim - d0),
                                             Cta::load_thread());
  };
  typename Cta::Acc acc;
  ce_gemm_loop<Cta, kF16, true, false>(smem, 2 * count, 1 << 30, load, KeepAccumulators(), acc);
  write_dhidden_tile<Cta, kF16>(p, rt, d0, acc);
}

// dE: linear_ce_dhidden_items on the Hopper loop (any grid; the runtime launches one CTA per SM),
// linear_ce_dhidden_tile on the portable one.
template <bool kF16, bool kSm90Loop = false>
__device__ __forceinline__ void linear_ce_dhidden(const CeBwdParams& p, const CeBwdMaps& maps) {
  if constexpr (CeProductCtaOf<kSm90Loop>::type::kWarpSpecialized)
    linear_ce_dhidden_items<kF16>(p, maps);
  else
    linear_ce_dhidden_tile<kF16>(p);
}

}  // namespace tilejit_ce
