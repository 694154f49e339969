// The operands of a KL term's products, shared by its forward (linear_ce_kl.cuh) and its gradient
// tiles (linear_ce_bwd.cuh). Each vocabulary tile of a KL program takes a pair of products over
// the same kKlRows kept rows: the student's logits (kept rows of E times the tile's weight rows)
// and the teacher's (the teacher's hidden states times its weight rows of the same ids), each
// kl_ksteps K steps, the shorter operand padded with zero columns. On the Hopper loop both come
// into a CeKlWsCta's ring (gemm_loop_sm90_ws_pairs): the hidden rows by TMA, a weight tile by TMA
// where its segment has no order, else gathered through the order with cp.async by the loading
// warpgroup.
#pragma once

#include "ce_wgmma.cuh"
#include "linear_ce_common.cuh"

namespace tilejit_ce {

constexpr int kKlRows = 128;  // kept rows per tile of a KL pair (the TMA box of the hidden rows)

// The Hopper CTA of both KL loops: two computing warpgroups of 64 rows x kTileIds (wgmma, every
// column of a row in one quad; 64 accumulators per thread and product, both products of a pair
// in registers) and a warpgroup that only loads, into a four-stage ring.
typedef CeWsCta<kKlRows, kTileIds, 4> CeKlWsCta;

// A KL program's tensor maps on the Hopper loop (encoded on the host, runtime/LinearCeTma.h):
// the kept rows of E and of the teacher's hidden states, packed [n_kept, dim] and [n_kept,
// teacher dim] by the runtime, in 64 x kKlRows boxes, and each segment's weight rows, the
// student's and the teacher's, in 64 x kTileIds boxes; 128-byte swizzle (load_kmajor's layout;
// columns past a dim read as zero, so the shorter operand of a pair pads itself). A segment with
// an order has no map (its rows are gathered) unless its bit of `in_position_order` (the
// forward's CeFwdParams::weights_in_position_order) is set: then both sides' maps are over copies
// of their weight rows in position order.
struct CeKlMaps {
  tjk::TmaDescriptor hidden, teacher_hidden;
  tjk::TmaDescriptor weight[kMaxSegments], teacher_weight[kMaxSegments];
};

// K steps of one product of a KL pair: both operands padded to the longer dim.
__device__ __forceinline__ int kl_ksteps(int dim, int teacher_dim) {
  return (max(dim, teacher_dim) + 63) / 64;
}

// Whether segment s's weight tiles, on the student's side (of_teacher false) or the teacher's,
// come by TMA on the Hopper loop (CeKlMaps).
__device__ __forceinline__ bool kl_weight_boxed(const CeLayout& L, const CeTeacher& T, int s,
                                                bool of_teacher, int in_position_order) {
  return !(of_teacher ? T.layout.seg[s] : L.seg[s]).order || (in_position_order >> s & 1);
}

// One product of a pair: vocabulary tile `tile` (its segment s, first position lbase in it) on
// the student's side or the teacher's.
struct KlProduct {
  const CeSegment* seg;  // the student's segment s, or the teacher's
  const u16* hidden;     // kept rows, row stride `stride`, `dim` columns
  long long stride;
  int dim, s, lbase;
  bool of_teacher;
  bool boxed;  // its weight tile comes by TMA (kl_weight_boxed)
};
__device__ __forceinline__ KlProduct kl_product(const CeLayout& L, const CeTeacher& T,
                                                const CeRows& R, int tile, bool of_teacher,
                                                int in_position_order) {
  const int s = tile_segment(L, tile);
  const CeSegment& S = of_teacher ? T.layout.seg[s] : L.seg[s];
  return {&S,
          of_teacher ? T.hidden : R.hidden,
          of_teacher ? T.hidden_stride : R.hidden_stride,
          of_teacher ? T.dim : R.dim,
          s,
          (tile - S.first_tile) * kTileIds,
          of_teacher,
          kl_weight_boxed(L, T, s, of_teacher, in_position_order)};
}

// Whether every weight tile comes by TMA: the loading threads other than the first then have
// nothing to copy.
__device__ __forceinline__ bool kl_all_boxes(const CeLayout& L, const CeTeacher& T,
                                             int in_position_order) {
  bool all = true;
  for (int s = 0; s < L.num_segments; ++s)
    all = all && kl_weight_boxed(L, T, s, false, in_position_order) &&
          kl_weight_boxed(L, T, s, true, in_position_order);
  return all;
}

// The Hopper loop's TMA copies of a step (K columns k0..) of product `q` over the kKlRows kept
// rows from row0: the A tile and, where q.boxed and `weights`, the B tile (kTileIds weight rows in
// position order) after it; one arrival on `full` with the bytes. In a cluster of `cluster` CTAs
// sharing row0 (the KL forward's, gemm_loop_sm90_ws_pairs), this CTA (`rank`) reads the A tile's
// rank-th slice of kKlRows / cluster rows into every one's stage (the hidden maps' boxes are that
// slice) and its peers the others, so `full` expects the whole tile all the same.
__device__ __forceinline__ void kl_load_boxes(const CeKlMaps& maps, const KlProduct& q, int row0,
                                              int k0, u32 a_tile, u32 full, bool weights = true,
                                              int cluster = 1, int rank = 0) {
  const bool b = weights && q.boxed;
  tjk::mbar_arrive_expect_tx(full, (kKlRows + (b ? kTileIds : 0)) * kRowBytes);
  const tjk::TmaDescriptor* hidden = q.of_teacher ? &maps.teacher_hidden : &maps.hidden;
  if (cluster == 1) {
    tjk::tma_load_2d(a_tile, hidden, k0, row0, full);
  } else {
    const int rows = kKlRows / cluster;
    tjk::tma_load_2d_multicast(a_tile + rank * rows * kRowBytes, hidden, k0, row0 + rank * rows,
                               full, static_cast<unsigned short>((1u << cluster) - 1));
  }
  if (b)
    tjk::tma_load_2d(a_tile + CeKlWsCta::kAElems * 2,
                     q.of_teacher ? &maps.teacher_weight[q.s] : &maps.weight[q.s], k0, q.lbase,
                     full);
}

// The cp.async copies of a step on CTA type Cta's loading threads: the A tile unless TMA brings
// it (a warp-specialised CTA), the B tile unless TMA brings it (a warp-specialised CTA and
// q.boxed): gathered through its segment's order, or a strided block. A gathered tile's rows are read from the order once per product
// (`product`: the caller's running number of it; the steps come in order).
template <class Cta>
struct KlCopies {
  GatheredRows<kTileIds, Cta::kLoadThreads> wrows;
  int wrows_product = -1;

  __device__ __forceinline__ void operator()(u16* a_tile, u16* b_tile, const KlProduct& q,
                                             int product, int row0, int n_kept, int k0) {
    if (!Cta::kWarpSpecialized)
      load_kmajor<kKlRows, Cta::kLoadThreads>(
          a_tile, CeOperand{q.hidden + row0 * q.stride + k0, q.stride, n_kept - row0, q.dim - k0},
          Cta::load_thread());
    if (Cta::kWarpSpecialized && q.boxed) return;
    const CeOperand w = weight_rows(*q.seg, q.lbase, k0, q.dim - k0);
    if (!w.gather) {
      load_kmajor<kTileIds, Cta::kLoadThreads>(b_tile, w, Cta::load_thread());
      return;
    }
    if (product != wrows_product) {
      wrows.read(w.gather, w.rows, Cta::load_thread());
      wrows_product = product;
    }
    load_kmajor<kTileIds, Cta::kLoadThreads>(b_tile, w, wrows, Cta::load_thread());
  }
};

}  // namespace tilejit_ce
