// The operands of a KL term's products, shared by its forward (linear_ce_kl.cuh) and its gradient
// tiles (linear_ce_bwd.cuh). Each vocabulary tile of a KL program takes a pair of products over
// the same kKlRows kept rows: the student's logits (kept rows of E times the tile's weight rows)
// and the teacher's (the teacher's hidden states times its weight rows of the same ids), each
// kl_ksteps K steps, the shorter operand padded with zero columns. On the Hopper loop both come
// into a CeKlWsCta's ring, one K step of both per stage (gemm_loop_sm90_ws_joint): the hidden
// rows by TMA, a weight tile by TMA where its segment has no order, else gathered through the
// order with cp.async by the loading warpgroup. Where the teacher's weight rows are the
// student's (CeTeacher::shared_weights: a teacher through the same head) a step brings one weight
// tile for both products.
#pragma once

#include "ce_wgmma.cuh"
#include "linear_ce_common.cuh"

namespace tilejit_ce {

constexpr int kKlRows = 128;  // kept rows per tile of a KL pair (the TMA box of the hidden rows)

// The Hopper CTA of both KL loops: two computing warpgroups of 64 rows x kTileIds (wgmma, every
// column of a row in one quad; 64 accumulators per thread and product, both products of a pair
// in registers) and a warpgroup that only loads, into a ring of 192 KiB. A stage holds one K step
// of both products (gemm_loop_sm90_ws_joint): the student's kept rows, the teacher's, the
// student's weight rows, the teacher's (absent where they are the student's). Three stages of
// four tiles, or, where the teacher shares every segment's weights, four of three (kl_ring).
struct CeKlWsCta : CeWsCta<kKlRows, kTileIds, 4> {
  static constexpr int kAElems = 2 * kKlRows * 64, kBElems = 2 * kTileIds * 64;
  static constexpr int kStageElems = kAElems + kBElems;
  static constexpr int kSharedStageElems = kAElems + kTileIds * 64;  // one weight tile
  static constexpr int kSmemBytes = 3 * kStageElems * 2;
  static_assert(4 * kSharedStageElems == 3 * kStageElems, "either ring fills the same memory");
};

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

// Both products of vocabulary tile `tile`; `shared`: the teacher's weight tile is the student's
// (CeTeacher::shared_weights), so one tile serves both.
// staged_row (the gradient tiles, an ordered segment; -1: none): the student's weight tile is
// rows staged_row.. of the chunk's staged copy in position order (linear_ce_stage_weights), by
// TMA (`staged` of kl_load_step); student.boxed is then set.
struct KlPair {
  KlProduct student, teacher;
  bool shared;
  int staged_row;
};
__device__ __forceinline__ KlPair kl_pair(const CeLayout& L, const CeTeacher& T, const CeRows& R,
                                          int tile, int in_position_order) {
  KlPair q{kl_product(L, T, R, tile, false, in_position_order),
           kl_product(L, T, R, tile, true, in_position_order), false, -1};
  q.shared = T.shares_weights(q.student.s);
  return q;
}

// The ring of a KL loop over layout L: four stages of three tiles where the teacher shares every
// segment's weights (CeTeacher::shared_weights), else three of four (CeKlWsCta).
__device__ __forceinline__ RingShape kl_ring(const CeLayout& L, const CeTeacher& T) {
  const int all = (1 << L.num_segments) - 1;
  if ((T.shared_weights & all) == all) return {4, CeKlWsCta::kSharedStageElems};
  return {3, CeKlWsCta::kStageElems};
}

// Whether every weight tile comes by TMA: the loading threads other than the first then have
// nothing to copy. `student_staged` (the gradient tiles): the student's ordered weights come from
// the chunk's staged copy, so only a teacher's own ordered weights (not shared) are gathered.
__device__ __forceinline__ bool kl_all_boxes(const CeLayout& L, const CeTeacher& T,
                                             int in_position_order, bool student_staged = false) {
  bool all = true;
  for (int s = 0; s < L.num_segments; ++s) {
    const bool student = student_staged || kl_weight_boxed(L, T, s, false, in_position_order);
    const bool teacher = kl_weight_boxed(L, T, s, true, in_position_order) ||
                         (student_staged && T.shares_weights(s));
    all = all && student && teacher;
  }
  return all;
}

// The Hopper loop's TMA copies of a step (K columns k0..) of both products of pair `q` over the
// kKlRows kept rows from row0, into the CeKlWsCta stage at `stage`: the student's and the
// teacher's A tiles and, where `weights`, the B tiles that come by TMA (KlProduct::boxed; the
// teacher's not where q.shared); one arrival on `full` with the bytes. In a cluster of `cluster`
// CTAs sharing row0 (the KL forward's), this CTA (`rank`) reads the A tiles' rank-th slices of
// kKlRows / cluster rows into every one's stage (the hidden maps' boxes are that slice) and its
// peers the others, so `full` expects the whole tiles all the same. `staged`: the map of
// KlPair::staged_row (CeBwdMaps::staged, in 64 x 64 boxes).
__device__ __forceinline__ void kl_load_step(const CeKlMaps& maps, const KlPair& q, int row0,
                                             int k0, u32 stage, u32 full, bool weights = true,
                                             int cluster = 1, int rank = 0,
                                             const tjk::TmaDescriptor* staged = nullptr) {
  const bool bs = weights && q.student.boxed, bt = weights && !q.shared && q.teacher.boxed;
  tjk::mbar_arrive_expect_tx(full, (2 * kKlRows + (bs + bt) * kTileIds) * kRowBytes);
  const u32 b_tiles = stage + CeKlWsCta::kAElems * 2;
  for (int side = 0; side < 2; ++side) {
    const tjk::TmaDescriptor* hidden = side ? &maps.teacher_hidden : &maps.hidden;
    const u32 a_tile = stage + side * kKlRows * kRowBytes;
    if (cluster == 1) {
      tjk::tma_load_2d(a_tile, hidden, k0, row0, full);
    } else {
      const int rows = kKlRows / cluster;
      tjk::tma_load_2d_multicast(a_tile + rank * rows * kRowBytes, hidden, k0, row0 + rank * rows,
                                 full, static_cast<unsigned short>((1u << cluster) - 1));
    }
  }
  if (bs && q.staged_row >= 0) {  // the staged map's boxes are 64 rows (CeBwdMaps)
#pragma unroll
    for (int j = 0; j < kTileIds / 64; ++j)
      tjk::tma_load_2d(b_tiles + j * 64 * kRowBytes, staged, k0, q.staged_row + 64 * j, full);
  } else if (bs) {
    tjk::tma_load_2d(b_tiles, &maps.weight[q.student.s], k0, q.student.lbase, full);
  }
  if (bt)
    tjk::tma_load_2d(b_tiles + kTileIds * kRowBytes, &maps.teacher_weight[q.teacher.s], k0,
                     q.teacher.lbase, full);
}

// The cp.async copies of a step of one product on the portable CTA type Cta's threads: the A tile
// (the kept rows) and the B tile, gathered through its segment's order or a strided block. A
// gathered tile's rows are read from the order once per product (`product`: the caller's running
// number of it; the steps come in order).
template <class Cta>
struct KlCopies {
  static_assert(!Cta::kWarpSpecialized, "the Hopper loop's loaders take KlPairCopies");
  GatheredRows<kTileIds, Cta::kLoadThreads> wrows;
  int wrows_product = -1;

  __device__ __forceinline__ void operator()(u16* a_tile, u16* b_tile, const KlProduct& q,
                                             int product, int row0, int n_kept, int k0) {
    load_kmajor<kKlRows, Cta::kLoadThreads>(
        a_tile, CeOperand{q.hidden + row0 * q.stride + k0, q.stride, n_kept - row0, q.dim - k0},
        Cta::load_thread());
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

// The cp.async copies of a step of both products of a pair on CeKlWsCta's loading threads: the
// weight tiles TMA does not bring (KlProduct::boxed), gathered through their segment's order,
// the teacher's after the student's unless q.shared. Both sides have the same order (CeTeacher),
// so one reading of a pair's rows serves both (`pair`: the caller's running number of the pair;
// the steps come in order).
struct KlPairCopies {
  GatheredRows<kTileIds, CeKlWsCta::kLoadThreads> wrows;
  int wrows_pair = -1;

  __device__ __forceinline__ void operator()(u16* b_tiles, const KlPair& q, int pair, int k0) {
    const bool student = !q.student.boxed, teacher = !q.shared && !q.teacher.boxed;
    if (!student && !teacher) return;
    const int tid = CeKlWsCta::load_thread();
    const CeOperand ws = weight_rows(*q.student.seg, q.student.lbase, k0, q.student.dim - k0);
    if (pair != wrows_pair) {  // (the student's order is the teacher's)
      wrows.read(ws.gather, ws.rows, tid);
      wrows_pair = pair;
    }
    if (student) load_kmajor<kTileIds, CeKlWsCta::kLoadThreads>(b_tiles, ws, wrows, tid);
    if (teacher) {
      const CeOperand wt = weight_rows(*q.teacher.seg, q.teacher.lbase, k0, q.teacher.dim - k0);
      load_kmajor<kTileIds, CeKlWsCta::kLoadThreads>(b_tiles + kTileIds * 64, wt, wrows, tid);
    }
  }
};

}  // namespace tilejit_ce
