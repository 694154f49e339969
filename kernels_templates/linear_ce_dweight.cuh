// dC = G^T . E, the loss products' second (linear_ce_products.cuh): the K steps over a tile's
// computed halves, the persistent Hopper loop and the portable one.
#pragma once

#include "linear_ce_product_cta.cuh"

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

}  // namespace tilejit_ce
