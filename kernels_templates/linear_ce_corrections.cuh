// Fused linear cross-entropy, backward: the sparse target corrections (a kept row's target entry
// that G does not hold, because its tile is skipped for the row's row tile: t_k E_k added to dC
// and t_k C[target] to dE by the products, t_k to dbias) and dC of the vocabulary tiles no row
// tile visits (linear_ce_dweight_cold: the smoothing term and those corrections alone). Used by
// linear_ce_products.cuh, which writes dC of the visited tiles with the same helpers.
#pragma once

#include "linear_ce_bwd.cuh"

namespace tilejit_ce {

// ---- target corrections ----------------------------------------------------------------------

// Whether kept row k's target entry is a sparse correction: its tile is not hot for the row's
// row tile (so G does not hold it).
__device__ __forceinline__ bool target_is_correction(const CeBwdParams& p, int k) {
  const int tile = p.target_slot[k] / kTileIds;
  return !(p.tile_class[(long long)(k / kTileRows) * p.layout.num_tiles + tile] & kTileHot);
}

// Weight row holding slot `slot` (a live id's place in the tiled vocabulary).
__device__ __forceinline__ const u16* slot_weight_row(const CeLayout& L, int slot) {
  const CeSegment& S = L.seg[tile_segment(L, slot / kTileIds)];
  return S.weight + (long long)seg_row(S, slot - S.first_tile * kTileIds) * S.weight_stride;
}

// A barrier among the threads that compute (after the tile loop, a warp-specialised CTA's
// loading threads have returned).
template <class Cta>
__device__ __forceinline__ void compute_threads_sync() {
  if constexpr (Cta::kWarpSpecialized)
    tjk::named_barrier_sync(2, Cta::kComputeThreads);
  else
    __syncthreads();
}

// add_target_rows_dweight's part for row tile rt, which holds a correction in `tile`: the rows'
// target positions in the tile and their gradients in shared memory, then thread i's column d
// of each such row's correction through add(position in the tile, d, t_k E_k[d]).
template <class Cta, bool kF16, class Add>
__device__ __forceinline__ void add_target_rows_of_row_tile(const CeBwdParams& p, int tile, int rt,
                                                            int d, int* rows, float* grads,
                                                            Add add) {
  const CeRows& R = p.rows;
  // dC rows written by other threads; the previous row tile's lists consumed
  compute_threads_sync<Cta>();
  if (threadIdx.x < kTileRows) {
    const int k = rt * kTileRows + threadIdx.x;
    int at = -1;
    if (k < R.n_kept && p.target_slot[k] / kTileIds == tile)
      at = p.target_slot[k] - tile * kTileIds;
    rows[threadIdx.x] = at;
    grads[threadIdx.x] = at >= 0 ? p.target_grad[k] : 0.f;
  }
  compute_threads_sync<Cta>();
  if (d >= R.dim) return;
  for (int r = 0; r < kTileRows; ++r) {
    if (rows[r] < 0) continue;
    const float e = to_float<kF16>(R.hidden[(long long)(rt * kTileRows + r) * R.hidden_stride + d]);
    add(rows[r], d, grads[r] * e);
  }
}

// dC[target_k] += t_k E_k for the rows whose target lies in this tile and is a correction, rows
// in ascending order; thread i owns column d0 + i, `add` takes (position in the tile, column,
// value). Runs after the tile's dC rows are written (to dC or, staged, to shared memory).
// The row tiles' classes are read kComputeThreads at a time, one load per thread (a load per
// row tile, each after the last, took ~20 us in a vocabulary tile that no row visits).
template <class Cta, bool kF16, class Add>
__device__ __forceinline__ void add_target_rows_dweight(const CeBwdParams& p, int tile, int d0,
                                                        Add add) {
  static_assert(Cta::kComputeThreads == Cta::kN, "one computing thread per dC column");
  static_assert(Cta::kComputeThreads >= kTileRows, "one computing thread per row of a row tile");
  __shared__ int rows[kTileRows];  // position in this tile of the row's target, or -1
  __shared__ float grads[kTileRows];
  __shared__ bool holds[Cta::kComputeThreads];  // per row tile of a batch: a correction here
  const int d = d0 + threadIdx.x;
  for (int rt0 = 0; rt0 < p.num_row_tiles; rt0 += Cta::kComputeThreads) {
    compute_threads_sync<Cta>();  // the previous batch's flags consumed
    const int mine = rt0 + threadIdx.x;
    holds[threadIdx.x] =
        mine < p.num_row_tiles &&
        p.tile_class[(long long)mine * p.layout.num_tiles + tile] == kTileHoldsTarget;
    compute_threads_sync<Cta>();
    const int batch = min(Cta::kComputeThreads, p.num_row_tiles - rt0);
    for (int i = 0; i < batch; ++i)
      if (holds[i]) add_target_rows_of_row_tile<Cta, kF16>(p, tile, rt0 + i, d, rows, grads, add);
  }
}

// add_target_rows_dweight's corrections added to a dC tile's accumulators (rows of the tile,
// columns d0 + Cta::col(ni)) in registers, in the same order: the `held` row tiles that hold a
// correction in `tile` (col_corrections, listed at the end of its col_list), and within each its
// rows in ascending order. Each warp reads the row tile's targets, 32 rows at a time, and the
// four threads holding a correction's position add t_k E_k over their columns. Warp by warp,
// no barrier: for an epilogue whose CTA's ring is busy with the next output tile.
template <class Cta, bool kF16>
__device__ __forceinline__ void add_target_rows_to_acc(const CeBwdParams& p, int tile, int d0,
                                                       int held, typename Cta::Acc& acc) {
  const CeRows& R = p.rows;
  const int* rts = p.col_list + (long long)(tile + 1) * p.num_row_tiles - 1;
  const int lane = threadIdx.x & 31;
  for (int m = 0; m < held; ++m) {
    const int rt = rts[-m];
    for (int r0 = rt * kTileRows; r0 < rt * kTileRows + kTileRows; r0 += 32) {
      const int k = r0 + lane;
      const int slot = k < R.n_kept ? p.target_slot[k] : -1;
      const int at = slot >= 0 && slot / kTileIds == tile ? slot - tile * kTileIds : -1;
      const float t = at >= 0 ? p.target_grad[k] : 0.f;
      for (unsigned rows = __ballot_sync(0xffffffffu, at >= 0); rows != 0; rows &= rows - 1) {
        const int from = __ffs(rows) - 1;
        const int pos = __shfl_sync(0xffffffffu, at, from);
        const float g = __shfl_sync(0xffffffffu, t, from);
        const u16* e = R.hidden + (long long)(r0 + from) * R.hidden_stride;
#pragma unroll
        for (int mi = 0; mi < Cta::kMI; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (Cta::row(mi, h) != pos) continue;
#pragma unroll
            for (int ni = 0; ni < Cta::kNI; ++ni) {
              const int d = d0 + Cta::col(ni);
              if (d >= R.dim) continue;
              acc[mi][ni][h * 2] += g * to_float<kF16>(e[d]);
              acc[mi][ni][h * 2 + 1] += g * to_float<kF16>(e[d + 1]);
            }
          }
      }
    }
  }
}

// Whether a target correction lands in vocabulary tile `tile` (some row tile holds a target there
// and does not visit it). Every thread calls it (it synchronises the block).
__device__ __forceinline__ bool tile_holds_corrections(const CeBwdParams& p, int tile) {
  bool mine = false;
  if (p.target_grad)
    for (int rt = threadIdx.x; rt < p.num_row_tiles; rt += blockDim.x)
      mine |= p.tile_class[(long long)rt * p.layout.num_tiles + tile] == kTileHoldsTarget;
  return __syncthreads_or(mine);
}

// dC of a vocabulary tile that no row tile visits and that holds no target correction: the
// analytic smoothing term -eps/L sum_r g_r E_r (zero without it) in every row, columns
// [d0, d0 + n), by all of the block's threads; 16-byte stores when the rows allow them.
template <bool kF16>
__device__ __forceinline__ void write_unvisited_dweight_tile(const CeBwdParams& p,
                                                             const CeSegment& S, int lbase, int d0,
                                                             int n) {
  const int rows = min(kTileIds, S.size - lbase), cols = min(n, p.rows.dim - d0);
  const float smooth = p.weight_colsum ? -p.uniform : 0.f;
  const int elem_bytes = S.d_weight_16 ? 2 : 4;
  const bool wide = ((reinterpret_cast<unsigned long long>(S.d_weight) |
                      (unsigned long long)(S.d_weight_stride * elem_bytes)) &
                     15) == 0;
  const int per_store = wide ? 16 / elem_bytes : 2;  // cols is a multiple of 8 (dim is)
  const int stores = cols / per_store;
  for (int i = threadIdx.x; i < rows * stores; i += blockDim.x) {
    const int r = i / stores, d = d0 + (i % stores) * per_store;
    const long long at = (long long)d_weight_row(S, lbase + r) * S.d_weight_stride + d;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[e] = smooth != 0.f && e < per_store ? smooth * p.hidden_wsum[d + e] : 0.f;
    if (S.d_weight_16) {
      u16* out = static_cast<u16*>(S.d_weight) + at;
      if (wide)
        *reinterpret_cast<uint4*>(out) =
            make_uint4(pack2<kF16>(v[0], v[1]), pack2<kF16>(v[2], v[3]), pack2<kF16>(v[4], v[5]),
                       pack2<kF16>(v[6], v[7]));
      else
        *reinterpret_cast<u32*>(out) = pack2<kF16>(v[0], v[1]);
    } else {
      float* out = static_cast<float*>(S.d_weight) + at;
      if (wide)
        *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
      else
        *reinterpret_cast<float2*>(out) = make_float2(v[0], v[1]);
    }
  }
}

// A 16-bit dC tile staged in f32 (`staged`, row stride `stride` floats, columns d0..) out to the
// segment's rows in E's dtype, each entry rounded once: two columns per thread and step, rows
// whole, by Cta's computing threads.
template <class Cta, bool kF16>
__device__ __forceinline__ void write_staged_dweight_tile(const CeBwdParams& p, const CeSegment& S,
                                                          int lbase, int d0, const float* staged,
                                                          int stride) {
  constexpr int kPairs = Cta::kN / 2;
  const int rows = min(kTileIds, S.size - lbase), pairs = min(Cta::kN, p.rows.dim - d0) / 2;
  for (int i = threadIdx.x; i < rows * kPairs; i += Cta::kComputeThreads) {
    const int r = i / kPairs, c = i % kPairs;
    if (c >= pairs) continue;
    const float2 v = *reinterpret_cast<const float2*>(staged + r * stride + 2 * c);
    *reinterpret_cast<u32*>(static_cast<u16*>(S.d_weight) +
                            (long long)d_weight_row(S, lbase + r) * S.d_weight_stride + d0 +
                            2 * c) = pack2<kF16>(v.x, v.y);
  }
}

// dbias at `slot`: the sum of t_k over rows whose target sits there as a correction, in order.
__device__ __forceinline__ float target_bias_correction(const CeBwdParams& p, int slot) {
  const int tile = slot / kTileIds;
  float acc = 0.f;
  for (int rt = 0; rt < p.num_row_tiles; ++rt) {
    if (p.tile_class[(long long)rt * p.layout.num_tiles + tile] != kTileHoldsTarget) continue;
    const int k1 = min(p.rows.n_kept, (rt + 1) * kTileRows);
    for (int k = rt * kTileRows; k < k1; ++k)
      if (p.target_slot[k] == slot) acc += p.target_grad[k];
  }
  return acc;
}

// The CTA of linear_ce_dweight_cold: one thread per dC column of its 128 and the f32 staging of
// a 16-bit tile (128 rows of them) in shared memory, small enough for three CTAs per SM.
struct CeColdCta {
  static constexpr bool kWarpSpecialized = false;
  static constexpr int kN = 128, kComputeThreads = 128, kThreads = 128;
  static constexpr int kStagedStride = kN + 8;  // floats, as linear_ce_dweight's staging
  static constexpr int kSmemBytes = kTileIds * kStagedStride * 4;
};

// Grid (ceil(dim / 128), chunk tiles), CeColdCta's threads and dynamic shared memory: dC of the
// chunk's vocabulary tiles that no row tile visits (linear_ce_dweight writes the visited ones):
// the smoothing term (or zero) in every row plus the target corrections landing there, exactly
// as linear_ce_dweight's epilogue would write them after no products. A filtered backward's
// later chunks are mostly such tiles; in linear_ce_dweight's CTAs (192 KiB) each took an SM for
// a few global round trips.
template <bool kF16>
__device__ __forceinline__ void linear_ce_dweight_cold(const CeBwdParams& p) {
  typedef CeColdCta Cta;
  extern __shared__ __align__(16) float cold_staged[];
  const int tile = p.chunk_first + blockIdx.y, d0 = blockIdx.x * Cta::kN;
  if (p.col_count[tile] != 0) return;
  const CeSegment& S = p.layout.seg[tile_segment(p.layout, tile)];
  const int lbase = (tile - S.first_tile) * kTileIds;
  if (!tile_holds_corrections(p, tile)) {
    write_unvisited_dweight_tile<kF16>(p, S, lbase, d0, Cta::kN);
    return;
  }
  // Zero products plus the smoothing term, as linear_ce_dweight's epilogue adds it (its +0 too).
  const int d = d0 + threadIdx.x, rows = min(kTileIds, S.size - lbase);
  const bool in = d < p.rows.dim;
  const float smooth = p.weight_colsum ? -p.uniform : 0.f;
  float v = 0.f;
  if (in && smooth != 0.f) v += smooth * p.hidden_wsum[d];
  if (S.d_weight_16) {  // corrections land here (target_grad is set): staged, rounded once
    for (int r = 0; r < rows; ++r) cold_staged[r * Cta::kStagedStride + threadIdx.x] = v;
    add_target_rows_dweight<Cta, kF16>(p, tile, d0, [&](int at, int dd, float x) {
      cold_staged[at * Cta::kStagedStride + dd - d0] += x;
    });
    __syncthreads();
    write_staged_dweight_tile<Cta, kF16>(p, S, lbase, d0, cold_staged, Cta::kStagedStride);
    return;
  }
  float* d_weight = static_cast<float*>(S.d_weight);
  if (in)
    for (int r = 0; r < rows; ++r)
      d_weight[(long long)d_weight_row(S, lbase + r) * S.d_weight_stride + d] = v;
  add_target_rows_dweight<Cta, kF16>(p, tile, d0, [&](int at, int dd, float x) {
    d_weight[(long long)d_weight_row(S, lbase + at) * S.d_weight_stride + dd] += x;
  });
}

#ifndef __CUDACC_RTC__
// nvcc builds launch the kernels directly (see linear_ce_common.cuh).
template <bool kF16>
__global__ void __launch_bounds__(CeColdCta::kThreads, 3)
    linear_ce_dweight_cold_kernel(const __grid_constant__ CeBwdParams p) {
  linear_ce_dweight_cold<kF16>(p);
}
#endif

}  // namespace tilejit_ce
