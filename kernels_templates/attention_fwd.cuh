// Block-sparse attention forward, portable tensor-core path (mma.sync, sm_80+),
// FlashAttention-2 style. Also the pieces the backward shares: tensor references, tile sizes
// and the per-element pass over an accumulator tile.
//
// One CTA per (q tile, b * Hq); grid = (B * Hq, q_tiles) and q tiles run last-first, so under a
// causal mask the longest rows start first. The Q tile sits in shared memory; K/V tiles of the
// block-mask runs stream through a cp.async double buffer. Each warp owns 16 * kMTiles query
// rows: S = Q K^T and O += P V run on m16n8k16 mma.sync with ldmatrix fragments from
// XOR-swizzled shared memory; the online softmax stays in fp32 registers (exp2 domain). Full
// tiles skip mask_mod, and interior full tiles skip bounds checks too.
//
// Hooks (from the generated program, or a stand-in): Prog::kMaskIsTrue, Prog::kScoreIsIdentity,
// Prog::mask_mod / score_mod / score_grad (args, ..., b, h, q, kv).
#pragma once

#include "block_mask.cuh"
#include "mma.cuh"
#include "softmax.cuh"

namespace tjk {

// A [B, H, S, D] tensor with arbitrary element strides for b, h, s; d contiguous. Rows must be
// 16-byte aligned (base and the three strides multiples of 8 elements).
struct AttnTensor {
  void* ptr;
  long long stride_b, stride_h, stride_s;

  __device__ __forceinline__ unsigned short* head(int b, int h) const {
    return static_cast<unsigned short*>(ptr) + b * stride_b + h * stride_h;
  }
};

struct AttnShape {
  int batch, heads_q, heads_kv, seq_q, seq_kv;
  float scale;  // multiplies <q, k> before score_mod
};

struct AttentionFwdParams {
  AttnTensor q, k, v, out;
  float* lse;   // [B, Hq, Sq] fp32, natural log
  int* work;    // the Hopper kernel's two work-item counters (zero before a launch, left zero),
                // or null for fixed shares (FwdWorkItem)
  AttnShape shape;
  BlockMaskView mask;
  int q_band;   // the Hopper kernel: q tiles of one (b, h) numbered together (FwdWorkItem); 0 = 1
};

// Tile sizes the block mask must be built with for the portable kernels.
constexpr int kAttnBlockKV = 64;
template <int kWarps, int kMTiles>
__host__ __device__ constexpr int attn_block_q() {
  return kWarps * 16 * kMTiles;
}

// Runs the score pipeline over an accumulator tile in place, given the hooks' parts of its rows
// (rp[mi][half]: row row0 + 16 mi + 8 half) and of its columns (col_parts(n).at[j]: column
// col0 + 8 n + j; computed there or read from registers): s becomes the log2-domain logits (-inf
// where masked or out of range). Without kTransposed rows are q and columns kv (forward, dQ); with
// it rows are kv and columns q (dK/dV). row0/col0: this thread's first row (warp base + g) and
// column (tile base + 2t). The parts may hold more than this pass reads (a mask part on a full
// tile). kUnscaled: the logits divided by score_log2_factor (element_logit).
template <class Prog, class Args, bool kMask, bool kBounds, bool kTransposed,
          bool kUnscaled = false, int kM, int kN, class RowParts, class ColPartsOf>
__device__ __forceinline__ void logits_from_parts(float (&s)[kM][kN][4], const Args& args,
                                                  const AttnShape& sh, float scale_log2, int b,
                                                  int h, int row0, int col0,
                                                  const RowParts (&rp)[kM][2],
                                                  ColPartsOf col_parts) {
  if constexpr (!kMask && !kBounds && Prog::kScoreIsIdentity) {
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int n = 0; n < kN; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[mi][n][c] *= scale_log2;
  } else {
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const auto& cp = col_parts(n);
#pragma unroll
      for (int mi = 0; mi < kM; ++mi)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const RowParts& r = rp[mi][c >> 1];
          const auto& k = cp.at[c & 1];
          int row = row0 + mi * 16 + (c >> 1) * 8, col = col0 + n * 8 + (c & 1);
          if constexpr (kTransposed)
            s[mi][n][c] = element_logit<Prog, Args, kMask, kBounds, kUnscaled>(
                args, k, r, s[mi][n][c], sh.scale, scale_log2, b, h, col, row, sh.seq_q,
                sh.seq_kv);
          else
            s[mi][n][c] = element_logit<Prog, Args, kMask, kBounds, kUnscaled>(
                args, r, k, s[mi][n][c], sh.scale, scale_log2, b, h, row, col, sh.seq_q,
                sh.seq_kv);
        }
    }
  }
}

// logits_from_parts with the parts computed here: per row once, per column once for all the
// rows (hook_parts.cuh).
template <class Prog, class Args, bool kMask, bool kBounds, bool kTransposed, int kM, int kN>
__device__ __forceinline__ void apply_logits(float (&s)[kM][kN][4], const Args& args,
                                             const AttnShape& sh, float scale_log2, int b, int h,
                                             int row0, int col0) {
  using RowParts = PositionParts<Prog, kMask, false, kTransposed>;
  using ColParts = PositionParts<Prog, kMask, false, !kTransposed>;
  RowParts rp[kM][2];
  if constexpr (kMask || kBounds || !Prog::kScoreIsIdentity)
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) compute_parts(rp[mi], args, b, h, row0 + mi * 16, 8);
  logits_from_parts<Prog, Args, kMask, kBounds, kTransposed>(
      s, args, sh, scale_log2, b, h, row0, col0, rp, [&](int n) {
        PartsPair<ColParts> cp;
        compute_parts(cp.at, args, b, h, col0 + n * 8, 1);
        return cp;
      });
}

// Picks the cheapest variant of apply_logits for a tile: full + interior, full at an edge, or
// partial (mask evaluated unless the program's mask is constant true).
template <class Prog, class Args, bool kTransposed, int kM, int kN>
__device__ __forceinline__ void tile_logits(float (&s)[kM][kN][4], const Args& args,
                                            const AttnShape& sh, float scale_log2, int b, int h,
                                            int row0, int col0, bool full, bool interior) {
  if (full && interior)
    apply_logits<Prog, Args, false, false, kTransposed>(s, args, sh, scale_log2, b, h, row0, col0);
  else if (full || Prog::kMaskIsTrue)
    apply_logits<Prog, Args, false, true, kTransposed>(s, args, sh, scale_log2, b, h, row0, col0);
  else
    apply_logits<Prog, Args, true, true, kTransposed>(s, args, sh, scale_log2, b, h, row0, col0);
}

// The lane index for fragment addresses: re-read at each use (kFresh, see lane_id) or not.
template <bool kFresh>
__device__ __forceinline__ int fragment_lane() {
  return kFresh ? lane_id() : static_cast<int>(threadIdx.x & 31);
}

// acc[kM][kN] += A (rows from a swizzled tile, k = kK16 * 16 columns) * B^T where B's rows are
// the n index (both stored row-major with contiguous k).
template <class T, class ATile, class BTile, int kM, int kN, int kK16, bool kFreshLane = true>
__device__ __forceinline__ void gemm_nt(float (&acc)[kM][kN][4], unsigned a_base, int a_row0,
                                        unsigned b_base, int b_row0) {
#pragma unroll
  for (int kk = 0; kk < kK16; ++kk) {
    unsigned a[kM][4];
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
      ATile::load_a(a[mi], a_base, a_row0 + mi * 16, kk * 16, fragment_lane<kFreshLane>());
#pragma unroll
    for (int np = 0; np < kN / 2; ++np) {
      unsigned bf[4];
      BTile::load_b(bf, b_base, b_row0 + np * 16, kk * 16, fragment_lane<kFreshLane>());
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        ElemOps<T>::mma(acc[mi][2 * np], a[mi], bf);
        ElemOps<T>::mma(acc[mi][2 * np + 1], a[mi], bf + 2);
      }
    }
  }
}

// acc[kM][kN] += P * B where P (rows x kP16 * 16) is held in registers in accumulator layout
// (two adjacent n-tiles of it are the A fragment of one k-step) and B (k rows, n contiguous) is
// read transposed from a swizzled tile starting at column 0.
template <class T, class BTile, int kM, int kN, int kP16, bool kFreshLane = true>
__device__ __forceinline__ void gemm_rs(float (&acc)[kM][kN][4], const float (&p)[kM][2 * kP16][4],
                                        unsigned b_base, int b_row0) {
#pragma unroll
  for (int kk = 0; kk < kP16; ++kk) {
    unsigned a[kM][4];
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
      a[mi][0] = ElemOps<T>::pack(p[mi][2 * kk][0], p[mi][2 * kk][1]);
      a[mi][1] = ElemOps<T>::pack(p[mi][2 * kk][2], p[mi][2 * kk][3]);
      a[mi][2] = ElemOps<T>::pack(p[mi][2 * kk + 1][0], p[mi][2 * kk + 1][1]);
      a[mi][3] = ElemOps<T>::pack(p[mi][2 * kk + 1][2], p[mi][2 * kk + 1][3]);
    }
#pragma unroll
    for (int np = 0; np < kN / 2; ++np) {
      unsigned bf[4];
      BTile::load_b_trans(bf, b_base, b_row0 + kk * 16, np * 16, fragment_lane<kFreshLane>());
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        ElemOps<T>::mma(acc[mi][2 * np], a[mi], bf);
        ElemOps<T>::mma(acc[mi][2 * np + 1], a[mi], bf + 2);
      }
    }
  }
}

// Writes a warp's accumulator rows (scaled per row) into a swizzled tile as 16-bit values.
template <class T, class Tile, int kM, int kN>
__device__ __forceinline__ void store_acc(unsigned char* tile, const float (&acc)[kM][kN][4],
                                          const float (&row_scale)[2 * kM], int row0) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < kM; ++mi)
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int r = row0 + mi * 16 + g + 8 * half;
        float f = row_scale[2 * mi + half];
        *reinterpret_cast<unsigned*>(tile + Tile::offset(r, n * 8 + 2 * t)) =
            ElemOps<T>::pack(acc[mi][n][2 * half] * f, acc[mi][n][2 * half + 1] * f);
      }
}

// Copies rows [row0, row0 + kRows) of a swizzled tile to global rows q0 + row (if < seq)
// with 16-byte stores, spread over kThreads threads starting at thread `first`.
template <class Tile, int kRows, int kThreads>
__device__ __forceinline__ void store_rows(const unsigned char* tile, unsigned short* g,
                                           long long stride, int row0, int q0, int seq,
                                           int thread) {
  constexpr int kTotal = kRows * Tile::kChunks;
#pragma unroll
  for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
    int idx = i * kThreads + thread;
    if (kTotal % kThreads != 0 && idx >= kTotal) break;
    int r = row0 + idx / Tile::kChunks, c = idx % Tile::kChunks;
    if (q0 + r < seq)
      *reinterpret_cast<uint4*>(g + (q0 + r) * stride + c * 8) =
          *reinterpret_cast<const uint4*>(tile + Tile::offset(r, c * 8));
  }
}

template <int kHeadDim, int kWarps, int kMTiles>
struct AttnFwdSmem {
  using QTile = SwizzledTile<attn_block_q<kWarps, kMTiles>(), kHeadDim>;
  using KVTile = SwizzledTile<kAttnBlockKV, kHeadDim>;
  static constexpr int kBytes = QTile::kBytes + 4 * KVTile::kBytes;
};

// Default shape: 4 warps of 32 rows, so each K/V fragment read from shared memory feeds two
// m-tiles (with 16 rows per warp, shared-memory bandwidth caps the tensor-core rate). At
// D = 128 this holds 128 accumulator registers per thread and ptxas spills a few bytes; the
// spill-free alternatives are kWarps = 8, kMTiles = 1 (about 15% slower on an H200) or
// kSubKV = 32 (the 64-column K/V tile consumed in halves, about 5% slower, 12 bytes of spill).
template <int kHeadDim>
struct AttnFwdConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "portable kernels support D = 64 and 128");
  static constexpr int kWarps = 4;
  static constexpr int kMTiles = 2;
  static constexpr int kSubKV = kAttnBlockKV;
};

// Grid (B * Hq, q_tiles), kWarps * 32 threads, dynamic shared memory
// AttnFwdSmem<D, kWarps, kMTiles>::kBytes (set cudaFuncAttributeMaxDynamicSharedMemorySize: it is
// above 48 KiB). The block mask must be built with block_q = 16 * kWarps * kMTiles (128 by
// default) and block_kv = 64.
//
// The body is a device function so that generated extern "C" entry points (with the same
// launch bounds) can instantiate it; attention_fwd_kernel below is the plain template kernel.
template <
    class Prog, class Args, class T, int kHeadDim, int kWarps = AttnFwdConfig<kHeadDim>::kWarps,
    int kMTiles = AttnFwdConfig<kHeadDim>::kMTiles, int kSubKV = AttnFwdConfig<kHeadDim>::kSubKV>
__device__ __forceinline__ void attention_fwd_cta(const AttentionFwdParams& p, const Args& args) {
  constexpr int kThreads = kWarps * 32, kBQ = attn_block_q<kWarps, kMTiles>();
  constexpr int kBKV = kAttnBlockKV, kN = kSubKV / 8, kDN = kHeadDim / 8;
  using Smem = AttnFwdSmem<kHeadDim, kWarps, kMTiles>;
  using QTile = typename Smem::QTile;
  using KVTile = typename Smem::KVTile;
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned s_q = smem_addr(smem), s_k = s_q + QTile::kBytes, s_v = s_k + 2 * KVTile::kBytes;

  if (p.mask.block_q != kBQ || p.mask.block_kv != kBKV) __trap();  // mask built for other tiles
  const AttnShape& sh = p.shape;
  const int b = blockIdx.x / sh.heads_q, h = blockIdx.x % sh.heads_q;
  const int hk = h / (sh.heads_q / sh.heads_kv);
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kBQ;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wrow = warp * 16 * kMTiles;  // the warp's first row in the tile
  const float scale_log2 = sh.scale * kLog2e;

  QTile::template load_async<kThreads>(s_q, p.q.head(b, h), p.q.stride_s, q0, sh.seq_q);
  auto load_kv = [&](unsigned offset, int tile) {
    KVTile::template load_async<kThreads>(s_k + offset, p.k.head(b, hk), p.k.stride_s, tile * kBKV,
                                          sh.seq_kv);
    KVTile::template load_async<kThreads>(s_v + offset, p.v.head(b, hk), p.v.stride_s, tile * kBKV,
                                          sh.seq_kv);
  };

  RunCursor cur;
  cur.begin(p.mask.offsets, p.mask.runs, p.mask.list_index(b, h, qt, p.mask.q_tiles));
  if (cur.valid()) load_kv(0, cur.tile());
  cp_async_commit();

  float o[kMTiles][kDN][4];
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int n = 0; n < kDN; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) o[mi][n][c] = 0.f;
  OnlineSoftmax<kMTiles> sm;
  sm.init();
  const bool q_interior = q0 + kBQ <= sh.seq_q;

  int buf = 0;
  while (cur.valid()) {
    const int kv0 = cur.tile() * kBKV;
    const bool full = cur.full();
    cp_async_wait<0>();
    __syncthreads();
    cur.next();
    if (cur.valid()) load_kv((buf ^ 1) * KVTile::kBytes, cur.tile());  // prefetch
    cp_async_commit();

    // The K/V tile is consumed kSubKV columns at a time: S of a sub-tile is all that lives
    // next to the O accumulator.
#pragma unroll 1
    for (int sub = 0; sub < kBKV / kSubKV; ++sub) {
      const int c0 = sub * kSubKV;
      float s[kMTiles][kN][4];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int n = 0; n < kN; ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) s[mi][n][c] = 0.f;
      gemm_nt<T, QTile, KVTile, kMTiles, kN, kHeadDim / 16, false>(s, s_q, wrow,
                                                                   s_k + buf * KVTile::kBytes, c0);
      tile_logits<Prog, Args, false>(s, args, sh, scale_log2, b, h, q0 + wrow + (lane >> 2),
                                     kv0 + c0 + 2 * (lane & 3), full,
                                     q_interior && kv0 + c0 + kSubKV <= sh.seq_kv);
      float alpha[2 * kMTiles];
      sm.update(s, alpha);
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int n = 0; n < kDN; ++n) {
          o[mi][n][0] *= alpha[2 * mi];
          o[mi][n][1] *= alpha[2 * mi];
          o[mi][n][2] *= alpha[2 * mi + 1];
          o[mi][n][3] *= alpha[2 * mi + 1];
        }
      gemm_rs<T, KVTile, kMTiles, kDN, kSubKV / 16, false>(o, s, s_v + buf * KVTile::kBytes, c0);
    }
    buf ^= 1;
  }

  // Epilogue: normalize, stage the warp's rows in its part of the Q tile, store 16 B per lane.
  cp_async_wait<0>();
  __syncthreads();
  float inv[2 * kMTiles], lse[2 * kMTiles];
  sm.finish(inv, lse);
  store_acc<T, QTile>(smem, o, inv, wrow);
  __syncwarp();
  store_rows<QTile, 16 * kMTiles, 32>(smem, p.out.head(b, h), p.out.stride_s, wrow, q0, sh.seq_q,
                                      lane);
  if ((lane & 3) == 0) {
    float* out_lse = p.lse + (static_cast<long long>(b) * sh.heads_q + h) * sh.seq_q;
#pragma unroll
    for (int i = 0; i < 2 * kMTiles; ++i) {
      int q = q0 + wrow + (i >> 1) * 16 + (i & 1) * 8 + (lane >> 2);
      if (q < sh.seq_q) out_lse[q] = lse[i];
    }
  }
}

template <
    class Prog, class Args, class T, int kHeadDim, int kWarps = AttnFwdConfig<kHeadDim>::kWarps,
    int kMTiles = AttnFwdConfig<kHeadDim>::kMTiles, int kSubKV = AttnFwdConfig<kHeadDim>::kSubKV>
__global__ void __launch_bounds__(kWarps * 32)
    attention_fwd_kernel(const __grid_constant__ AttentionFwdParams p,
                         const __grid_constant__ Args args) {
  attention_fwd_cta<Prog, Args, T, kHeadDim, kWarps, kMTiles, kSubKV>(p, args);
}

}  // namespace tjk
