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
#pragma once

#include "ce_wgmma_items.cuh"
#include "linear_ce_corrections.cuh"

namespace tilejit_ce {

// dC's K steps over a vocabulary tile's visited pairs (col_list order): each pair's computed
// 64-row halves (linear_ce_tiles.cuh), walked in order by whoever loads them; the next pair's
// entry is read one pair ahead. Every visited pair has a computed half.
struct HalfSteps {
  const int* list;
  int count, j = -1, half = 0, entry = 0, next = 0;
  __device__ HalfSteps(const int* list, int count) : list(list), count(count) {
    if (count > 0) next = list[0];
  }
  // Moves to the next step: pair j (its block and rows), half `half`.
  __device__ __forceinline__ void advance() {
    if (j >= 0 && half == 0 && (pair_halves(entry) >> 1 & 1)) {
      half = 1;
      return;
    }
    entry = next;
    half = pair_halves(entry) & 1 ? 0 : 1;
    if (++j + 1 < count) next = list[j + 1];
  }
  // The step's first row of E (kept rows).
  __device__ __forceinline__ int row() const {
    return pair_row_tile(entry) * kTileRows + half * 64;
  }
};

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

// dE's epilogue for the output tile (row tile rt, columns d0..) of a CTA type Cta: the chunk's
// products in acc, plus on the first chunk the smoothing term and the rows' target corrections
// (written), or added to what earlier chunks wrote. Every load of a row's batch of entries is
// issued before the batch's first store: the compiler cannot tell the stores from the loads
// (the weights' column sums and rows, dE itself), so a load placed after a store waits for it;
// entry by entry, the epilogue made one round trip to memory per entry (64 per output tile and
// thread on the Hopper loop).
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
        if (!p.first_chunk) {
          const float2 old = *reinterpret_cast<const float2*>(dst[r] + d);
          v[j].x += old.x;
          v[j].y += old.y;
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

// dC on the Hopper loop, persistent: the items are the chunk's (vocabulary tile, dim tile) pairs,
// the dim tiles of a tile side by side (its CTAs share its blocks of G in L2, as the grid's
// order did), taken in that order (ProductItems: the chunk's tiles come hottest first in an
// order, so longer items go first); tiles no row tile visits have none
// (linear_ce_dweight_cold). An item's K steps and operands are linear_ce_dweight's; its epilogue
// adds the smoothing term and the target corrections in registers (add_target_rows_to_acc: the
// ring, where the one-tile kernel stages its tile, holds the next item's steps by then) and
// writes each entry once, rounded once. A chunk's dC went from a CTA per item, each filling its
// ring, running a short K loop (a few of the tile's visited halves) and its epilogue alone on
// its SM, to one CTA per SM whose loader runs ahead into the next item.
template <bool kF16>
__device__ __forceinline__ void linear_ce_dweight_items(const CeBwdParams& p,
                                                        const CeBwdMaps& maps) {
  typedef CeProductWsCta Cta;
  extern __shared__ __align__(1024) u16 smem[];  // 1024: the swizzle patterns
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const int dim_tiles = (R.dim + Cta::kN - 1) / Cta::kN, items = p.chunk_tiles * dim_tiles;
  auto tile_of = [&](int item) { return p.chunk_first + item / dim_tiles; };
  auto d0_of = [&](int item) { return item % dim_tiles * Cta::kN; };

  auto load_items = [&](ItemRingLoader<Cta>& ring) {
    ProductItems taken(p);
    for (int item = taken.next(); item < items; item = taken.next()) {
      const int tile = tile_of(item), d0 = d0_of(item);
      const int count = p.col_count[tile];
      if (count == 0) continue;
      const int steps = p.col_steps[tile], block0 = chunk_block(p, tile, 0);
      HalfSteps at(p.col_list + (long long)tile * p.num_row_tiles, count);
      for (int k = 0; k < steps; ++k) {
        at.advance();
        const int a_row = (block0 + at.j) * kTileRows + at.half * 64, k0 = at.row();
        ring.push(item | (k + 1 == steps ? kTagLast : 0), [&](u32 a_tile, u32 full) {
          // G^T's two 64-column panels and E's four, as linear_ce_dweight's boxes
          tjk::mbar_arrive_expect_tx(full, (kTileIds + Cta::kN) * 128);
#pragma unroll
          for (int j = 0; j < kTileIds / 64; ++j)
            tjk::tma_load_2d(a_tile + j * 64 * 128, &maps.grad, 64 * j, a_row, full);
          const u32 b_tile = a_tile + Cta::kAElems * 2;
#pragma unroll
          for (int j = 0; j < Cta::kN / 64; ++j)
            tjk::tma_load_2d(b_tile + j * 64 * 128, &maps.hidden, d0 + 64 * j, k0, full);
        });
      }
    }
  };
  int held = 0;  // the item's row tiles holding a target correction (read while it multiplies)
  auto item_begin = [&](int item) { held = p.target_grad ? p.col_corrections[tile_of(item)] : 0; };
  const float smooth = p.weight_colsum ? -p.uniform : 0.f;
  auto item_done = [&](int item, typename Cta::Acc& acc) {
    const int tile = tile_of(item), d0 = d0_of(item);
    const CeSegment& S = L.seg[tile_segment(L, tile)];
    const int lbase = (tile - S.first_tile) * kTileIds;
    if (smooth != 0.f)
#pragma unroll
      for (int mi = 0; mi < Cta::kMI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int ni = 0; ni < Cta::kNI; ++ni) {
            const int d = d0 + Cta::col(ni);
            if (d >= R.dim) continue;
            acc[mi][ni][h * 2] += smooth * p.hidden_wsum[d];
            acc[mi][ni][h * 2 + 1] += smooth * p.hidden_wsum[d + 1];
          }
    if (held > 0) add_target_rows_to_acc<Cta, kF16>(p, tile, d0, held, acc);
    // The rows' places and the segment's output, read before the first store (which the
    // compiler cannot tell from these reads), the dtype's branch taken once per row.
    constexpr int kRows = Cta::kMI * 2;
    long long row[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int pos = lbase + Cta::row(r >> 1, r & 1);
      row[r] = pos < S.size ? (long long)d_weight_row(S, pos) * S.d_weight_stride : -1;
    }
    void* const d_weight = S.d_weight;
    const bool d_weight_16 = S.d_weight_16;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (row[r] < 0) continue;
      const int mi = r >> 1, h = r & 1;
      if (d_weight_16) {
        u16* const out = static_cast<u16*>(d_weight) + row[r];
#pragma unroll
        for (int ni = 0; ni < Cta::kNI; ++ni) {
          const int d = d0 + Cta::col(ni);
          if (d < R.dim)
            *reinterpret_cast<u32*>(out + d) =
                pack2<kF16>(acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);
        }
      } else {
        float* const out = static_cast<float*>(d_weight) + row[r];
#pragma unroll
        for (int ni = 0; ni < Cta::kNI; ++ni) {
          const int d = d0 + Cta::col(ni);
          if (d < R.dim)
            *reinterpret_cast<float2*>(out + d) =
                make_float2(acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);
        }
      }
    }
  };
  typename Cta::Acc acc;
  gemm_loop_sm90_ws_items<Cta, kF16, false, false>(smem, load_items, item_begin, item_done, acc);
}

// Grid (ceil(dim / 256), chunk tiles), the portable loop (CeProductCta): dC for one vocabulary
// tile that some row tile visits, written once (plus its target corrections;
// linear_ce_dweight_cold writes the others); a tile's dim tiles neighbours in the launch order,
// so they share its blocks of G.
template <bool kF16>
__device__ __forceinline__ void linear_ce_dweight_tile(const CeBwdParams& p) {
  typedef CeProductCta Cta;
  extern __shared__ __align__(1024) u16 smem[];
  const CeLayout& L = p.layout;
  const CeRows& R = p.rows;
  const int ct = blockIdx.y, tile = p.chunk_first + ct, d0 = blockIdx.x * Cta::kN;
  const CeSegment& S = L.seg[tile_segment(L, tile)];
  const int lbase = (tile - S.first_tile) * kTileIds;
  const int* list = p.col_list + (long long)tile * p.num_row_tiles;
  const int count = p.col_count[tile];
  if (count == 0) return;  // linear_ce_dweight_cold writes the tiles no row tile visits
  const int block0 = chunk_block(p, tile, 0);  // its pairs' blocks follow

  // K steps: the computed halves of the visited pairs, in order (HalfSteps).
  const int steps = p.col_steps[tile];
  HalfSteps at(list, count);
  auto load = [&](u16* a_tile, u16* b_tile, int) {
    at.advance();
    const int k0 = at.row();
    load_mnmajor<kTileIds, Cta::kLoadThreads>(
        a_tile,
        CeOperand{p.grad + grad_block_row(block0 + at.j, at.half * 64), kTileIds, 64, kTileIds},
        Cta::load_thread());
    load_mnmajor<Cta::kN, Cta::kLoadThreads>(
        b_tile,
        CeOperand{R.hidden + k0 * R.hidden_stride + d0, R.hidden_stride, R.n_kept - k0, R.dim - d0},
        Cta::load_thread());
  };
  typename Cta::Acc acc;
  ce_gemm_loop<Cta, kF16, false, false>(smem, steps, 1 << 30, load, KeepAccumulators(), acc);

  // 16-bit dC with target corrections: the tile goes through shared memory in f32 (the ring has
  // drained), its corrections are added there, and each entry is rounded once on the way out.
  const bool staged = S.d_weight_16 && p.target_grad;
  constexpr int kStagedStride = Cta::kN + 8;  // floats; + 8: the fragments' rows spread on banks
  static_assert(kTileIds * kStagedStride * 4 <= Cta::kSmemBytes, "staged dC tile fits the ring");
  float* staged_tile = reinterpret_cast<float*>(smem);
  if (staged) compute_threads_sync<Cta>();  // every computing thread is past the ring

  const float smooth = p.weight_colsum ? -p.uniform : 0.f;
#pragma unroll
  for (int mi = 0; mi < Cta::kMI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int pos = lbase + acc_row<Cta>(mi, h);
      if (pos >= S.size) continue;
      const long long row = (long long)d_weight_row(S, pos) * S.d_weight_stride;
#pragma unroll
      for (int ni = 0; ni < Cta::kNI; ++ni) {
        int d = d0 + acc_col<Cta>(ni);
        if (d >= R.dim) continue;
        float2 v = make_float2(acc[mi][ni][h * 2], acc[mi][ni][h * 2 + 1]);
        if (smooth != 0.f) {
          v.x += smooth * p.hidden_wsum[d];
          v.y += smooth * p.hidden_wsum[d + 1];
        }
        if (staged)
          *reinterpret_cast<float2*>(staged_tile + acc_row<Cta>(mi, h) * kStagedStride +
                                     acc_col<Cta>(ni)) = v;
        else if (S.d_weight_16)
          *reinterpret_cast<u32*>(static_cast<u16*>(S.d_weight) + row + d) = pack2<kF16>(v.x, v.y);
        else
          *reinterpret_cast<float2*>(static_cast<float*>(S.d_weight) + row + d) = v;
      }
    }
  if (!p.target_grad) return;
  if (!staged) {
    float* d_weight = static_cast<float*>(S.d_weight);
    add_target_rows_dweight<Cta, kF16>(p, tile, d0, [&](int at, int d, float v) {
      d_weight[(long long)d_weight_row(S, lbase + at) * S.d_weight_stride + d] += v;
    });
    return;
  }
  add_target_rows_dweight<Cta, kF16>(
      p, tile, d0, [&](int at, int d, float v) { staged_tile[at * kStagedStride + d - d0] += v; });
  compute_threads_sync<Cta>();
  write_staged_dweight_tile<Cta, kF16>(p, S, lbase, d0, staged_tile, kStagedStride);
}

// dC of the chunk's visited tiles: linear_ce_dweight_items on the Hopper loop (any grid; the
// runtime launches one CTA per SM), linear_ce_dweight_tile on the portable one.
template <bool kF16, bool kSm90Loop = false>
__device__ __forceinline__ void linear_ce_dweight(const CeBwdParams& p, const CeBwdMaps& maps) {
  if constexpr (CeProductCtaOf<kSm90Loop>::type::kWarpSpecialized)
    linear_ce_dweight_items<kF16>(p, maps);
  else
    linear_ce_dweight_tile<kF16>(p);
}

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
