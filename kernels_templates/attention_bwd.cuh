// Block-sparse attention backward, portable tensor-core path (mma.sync, sm_80+),
// FlashAttention-2 style. Kernels, launched in this order:
//
//   attention_bwd_preprocess_kernel  delta = rowsum(dO * O) (fp32), the lse in the log2 domain;
//                                    zeroes dq_accum if given
//   attention_bwd_kernel             one CTA per (kv tile, b * Hkv): walks the transposed
//                                    block-mask runs of every q head of its GQA group, recomputes
//                                    P from lse and accumulates dK, dV in registers (so the group
//                                    sum is in a fixed order). kAtomicDq: also adds dS K into the
//                                    fp32 dq_accum with atomics.
//   attention_bwd_dq_convert_kernel  dQ = scale * dq_accum in the input dtype (atomic mode), or
//   attention_bwd_dq_kernel          deterministic mode: one CTA per (q tile, b * Hq) walks the
//                                    forward runs and computes dQ = scale * dS K without atomics.
// Each kernel's body is a device function (<name>_cta) so that generated extern "C" entry
// points with the same launch bounds can instantiate it.
//
// With x = log2e * score_mod(scale * qk), P = exp2(x - log2e * lse); dP = dO V^T;
// dS = P * (dP - delta) * score_grad(scale * qk) (zero wherever P is zero, so hooks only run
// where the mask holds); dV = P^T dO, dK = scale * dS^T Q, dQ = scale * dS K. A row with
// lse = -inf (fully masked) has P = 0 everywhere.
#pragma once

#include "attention_fwd.cuh"

namespace tjk {

struct AttentionBwdParams {
  AttnTensor q, k, v, out, d_out, dq, dk, dv;
  const float* lse;  // [B, Hq, Sq] from the forward
  float* delta;      // [B, Hq, Sq] written by the preprocess kernel
  float* lse_log2;   // [B, Hq, Sq] lse_log2(lse), written by the preprocess kernel
  float* dq_accum;   // [B, Hq, Sq, D] fp32 (atomic mode only; else null)
  AttnShape shape;
  BlockMaskView mask;
  // The Hopper kernel's schedule (attention_bwd_sm90_ring.cuh, BwdSm90Item): its two work-item
  // counters (zero before a launch, left zero), its band of key blocks and its number of items
  // (B * Hkv * key blocks).
  int* work;
  int key_band;
  int items;
};

// log2-domain lse used to recompute P; a fully masked row gets +inf so that P = exp2(-inf) = 0.
__device__ __forceinline__ float lse_log2(float lse) {
  return lse == neg_inf() ? pos_inf() : lse * kLog2e;
}

// One warp per (b, h, q) row. Grid: ceil(B * Hq * Sq / 8) blocks of 256 threads.
template <class T, int kHeadDim>
__device__ __forceinline__ void attention_bwd_preprocess_cta(const AttentionBwdParams& p) {
  const AttnShape& sh = p.shape;
  long long row = static_cast<long long>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (row >= static_cast<long long>(sh.batch) * sh.heads_q * sh.seq_q) return;
  int lane = threadIdx.x & 31;
  int q = static_cast<int>(row % sh.seq_q);
  int bh = static_cast<int>(row / sh.seq_q), b = bh / sh.heads_q, h = bh % sh.heads_q;
  const unsigned short* o = p.out.head(b, h) + q * p.out.stride_s;
  const unsigned short* d_o = p.d_out.head(b, h) + q * p.d_out.stride_s;
  float sum = 0.f;
#pragma unroll
  for (int d = lane * 2; d < kHeadDim; d += 64) {
    unsigned ov = *reinterpret_cast<const unsigned*>(o + d);
    unsigned gv = *reinterpret_cast<const unsigned*>(d_o + d);
    sum += ElemOps<T>::lo(ov) * ElemOps<T>::lo(gv) + ElemOps<T>::hi(ov) * ElemOps<T>::hi(gv);
    if (p.dq_accum) *reinterpret_cast<float2*>(p.dq_accum + row * kHeadDim + d) = float2{0.f, 0.f};
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) p.delta[row] = sum, p.lse_log2[row] = lse_log2(p.lse[row]);
}

template <class T, int kHeadDim>
__global__ void __launch_bounds__(256)
    attention_bwd_preprocess_kernel(const __grid_constant__ AttentionBwdParams p) {
  attention_bwd_preprocess_cta<T, kHeadDim>(p);
}

// Turns S (in s, raw q.k) and dP (in dp) into P and dS for one tile. stats(mi, n, c, L, D)
// gives the log2-domain lse and delta of the element's query row.
template <class Prog, class Args, bool kMask, bool kBounds, bool kTransposed, int kM, int kN,
          class Stats>
__device__ __forceinline__ void apply_bwd(float (&s)[kM][kN][4], float (&dp)[kM][kN][4],
                                          const Args& args, const AttnShape& sh, float scale_log2,
                                          int b, int h, int row0, int col0, Stats stats) {
  // The hooks' parts: per row once, per column once for all the rows (hook_parts.cuh).
  using QP = QParts<Prog, kMask, true>;
  using KP = KvParts<Prog, kMask, true>;
  using RowParts = PositionParts<Prog, kMask, true, kTransposed>;
  using ColParts = PositionParts<Prog, kMask, true, !kTransposed>;
  RowParts rp[kM][2];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) compute_parts(rp[mi], args, b, h, row0 + mi * 16, 8);
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    ColParts cp[2];
    compute_parts(cp, args, b, h, col0 + n * 8, 1);
#pragma unroll
    for (int mi = 0; mi < kM; ++mi)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        int row = row0 + mi * 16 + (c >> 1) * 8, col = col0 + n * 8 + (c & 1);
        int q = kTransposed ? col : row, kv = kTransposed ? row : col;
        const QP* qp;
        const KP* kp;
        if constexpr (kTransposed)
          qp = &cp[c & 1], kp = &rp[mi][c >> 1];
        else
          qp = &rp[mi][c >> 1], kp = &cp[c & 1];
        float lse2, delta, pg;  // pg: P * score_grad
        stats(mi, n, c, lse2, delta);
        float pr = element_probability<Prog, Args, kMask, kBounds>(
            args, *qp, *kp, s[mi][n][c], sh.scale, scale_log2, b, h, q, kv, sh.seq_q, sh.seq_kv,
            lse2, pg);
        float ds = pg * (dp[mi][n][c] - delta);
        s[mi][n][c] = pr;
        dp[mi][n][c] = ds;
      }
  }
}

template <class Prog, class Args, bool kTransposed, int kM, int kN, class Stats>
__device__ __forceinline__ void tile_bwd(float (&s)[kM][kN][4], float (&dp)[kM][kN][4],
                                         const Args& args, const AttnShape& sh, float scale_log2,
                                         int b, int h, int row0, int col0, bool full, bool interior,
                                         Stats stats) {
  if (full && interior)
    apply_bwd<Prog, Args, false, false, kTransposed>(s, dp, args, sh, scale_log2, b, h, row0, col0,
                                                     stats);
  else if (full || Prog::kMaskIsTrue)
    apply_bwd<Prog, Args, false, true, kTransposed>(s, dp, args, sh, scale_log2, b, h, row0, col0,
                                                    stats);
  else
    apply_bwd<Prog, Args, true, true, kTransposed>(s, dp, args, sh, scale_log2, b, h, row0, col0,
                                                   stats);
}

template <int kM, int kN>
__device__ __forceinline__ void zero_acc(float (&a)[kM][kN][4]) {
#pragma unroll
  for (int mi = 0; mi < kM; ++mi)
#pragma unroll
    for (int n = 0; n < kN; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) a[mi][n][c] = 0.f;
}

// The q steps of one kv-tile CTA: every q head of the GQA group, the transposed runs of each,
// every q tile of a run split into kSub steps of block_q / kSub rows.
template <int kSub>
struct BwdSteps {
  RunCursor cur;
  int head, last_head, sub;
  const BlockMaskView* mask;
  int b, kt;

  __device__ __forceinline__ void begin(const BlockMaskView& m, int b_, int first_head, int n_heads,
                                        int kt_) {
    mask = &m, b = b_, kt = kt_, head = first_head, last_head = first_head + n_heads - 1, sub = 0;
    open_head();
  }
  __device__ __forceinline__ void open_head() {
    for (;;) {
      cur.begin(mask->t_offsets, mask->t_runs, mask->list_index(b, head, kt, mask->kv_tiles));
      if (cur.valid() || head == last_head) return;
      ++head;
    }
  }
  __device__ __forceinline__ bool valid() const { return cur.valid(); }
  __device__ __forceinline__ void next() {
    if (++sub < kSub) return;
    sub = 0;
    cur.next();
    if (!cur.valid() && head < last_head) {
      ++head;
      open_head();
    }
  }
};

// q rows per step: 64, except 32 at D = 128 with atomic dQ, where S^T, dP^T, the dK and dV
// accumulators and the dQ partial of a 64-row step do not fit in 255 registers.
template <int kHeadDim, bool kAtomicDq>
__host__ __device__ constexpr int attn_bwd_q_step() {
  return kHeadDim == 128 && kAtomicDq ? 32 : 64;
}

template <int kHeadDim, int kQStep_>
struct AttnBwdSmem {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "portable kernels support D = 64 and 128");
  static constexpr int kQStep = kQStep_;
  using KVTile = SwizzledTile<kAttnBlockKV, kHeadDim>;
  using QTile = SwizzledTile<kQStep, kHeadDim>;
  using DsTile = SwizzledTile<kAttnBlockKV, kQStep>;
  static constexpr int kStats = 2 * kQStep * 4;  // lse and delta of one step
  static constexpr int kBytes =
      2 * KVTile::kBytes + 4 * QTile::kBytes + 2 * kStats + DsTile::kBytes;
};

// Grid (B * Hkv, kv_tiles), 128 threads; dynamic shared memory AttnBwdSmem<D, kQStep>::kBytes
// (kQStep = attn_bwd_q_step<D, kAtomicDq>() by default). The
// block mask must be built with block_q = 128 and block_kv = 64.
template <class Prog, class Args, class T, int kHeadDim, bool kAtomicDq,
          int kQStep_ = attn_bwd_q_step<kHeadDim, kAtomicDq>()>
__device__ __forceinline__ void attention_bwd_cta(const AttentionBwdParams& p, const Args& args) {
  using Smem = AttnBwdSmem<kHeadDim, kQStep_>;
  using KVTile = typename Smem::KVTile;
  using QTile = typename Smem::QTile;
  using DsTile = typename Smem::DsTile;
  constexpr int kThreads = 128, kQStep = Smem::kQStep, kBKV = kAttnBlockKV;
  constexpr int kSub = attn_block_q<8, 1>() / kQStep, kQN = kQStep / 8, kDN = kHeadDim / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned s_k = smem_addr(smem), s_v = s_k + KVTile::kBytes, s_q = s_v + KVTile::kBytes,
                 s_do = s_q + 2 * QTile::kBytes, s_ds = s_do + 2 * QTile::kBytes,
                 s_stats = s_ds + DsTile::kBytes;
  const float* stats_ptr = reinterpret_cast<const float*>(smem + (s_stats - s_k));

  if (p.mask.block_q != kSub * kQStep || p.mask.block_kv != kBKV) __trap();
  const AttnShape& sh = p.shape;
  const int group = sh.heads_q / sh.heads_kv;
  const int b = blockIdx.x / sh.heads_kv, hk = blockIdx.x % sh.heads_kv;
  const int kt = blockIdx.y, kv0 = kt * kBKV;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float scale_log2 = sh.scale * kLog2e;

  KVTile::template load_async<kThreads>(s_k, p.k.head(b, hk), p.k.stride_s, kv0, sh.seq_kv);
  KVTile::template load_async<kThreads>(s_v, p.v.head(b, hk), p.v.stride_s, kv0, sh.seq_kv);

  // Loads step (head, q rows from q0) into buffer `buf`: Q, dO, lse, delta (zero past the end).
  auto load_step = [&](int buf, int head, int q0) {
    QTile::template load_async<kThreads>(s_q + buf * QTile::kBytes, p.q.head(b, head), p.q.stride_s,
                                         q0, sh.seq_q);
    QTile::template load_async<kThreads>(s_do + buf * QTile::kBytes, p.d_out.head(b, head),
                                         p.d_out.stride_s, q0, sh.seq_q);
    if (threadIdx.x < 2 * kQStep) {  // lse by the first kQStep threads, delta by the next
      int i = threadIdx.x % kQStep, q = q0 + i;
      long long row = (static_cast<long long>(b) * sh.heads_q + head) * sh.seq_q;
      bool in = q < sh.seq_q;
      const float* src = threadIdx.x < kQStep ? p.lse : p.delta;
      unsigned dst = s_stats + buf * Smem::kStats + (threadIdx.x / kQStep) * kQStep * 4 + i * 4;
      cp_async_4(dst, src + (in ? row + q : 0), in ? 4 : 0);
    }
  };

  BwdSteps<kSub> it;
  it.begin(p.mask, b, hk * group, group, kt);
  if (it.valid()) load_step(0, it.head, it.cur.tile() * (kSub * kQStep) + it.sub * kQStep);
  cp_async_commit();

  float dv[1][kDN][4], dk[1][kDN][4];
  zero_acc(dv);
  zero_acc(dk);
  const bool kv_interior = kv0 + kBKV <= sh.seq_kv;
  int buf = 0;
  while (it.valid()) {
    const int h = it.head, q0 = it.cur.tile() * (kSub * kQStep) + it.sub * kQStep;
    const bool full = it.cur.full();
    cp_async_wait<0>();
    __syncthreads();
    it.next();
    if (it.valid()) load_step(buf ^ 1, it.head, it.cur.tile() * (kSub * kQStep) + it.sub * kQStep);
    cp_async_commit();

    float st[1][kQN][4], dpt[1][kQN][4];  // S^T and dP^T: rows kv, columns q
    zero_acc(st);
    zero_acc(dpt);
    gemm_nt<T, KVTile, QTile, 1, kQN, kHeadDim / 16>(st, s_k, warp * 16, s_q + buf * QTile::kBytes,
                                                     0);
    gemm_nt<T, KVTile, QTile, 1, kQN, kHeadDim / 16>(dpt, s_v, warp * 16,
                                                     s_do + buf * QTile::kBytes, 0);
    const float* lse_s = stats_ptr + buf * (Smem::kStats / 4);
    auto stats = [&](int, int n, int c, float& l2, float& d) {
      int col = n * 8 + 2 * (lane & 3) + (c & 1);
      l2 = lse_log2(lse_s[col]);
      d = lse_s[kQStep + col];
    };
    tile_bwd<Prog, Args, true>(st, dpt, args, sh, scale_log2, b, h, kv0 + warp * 16 + (lane >> 2),
                               q0 + 2 * (lane & 3), full, kv_interior && q0 + kQStep <= sh.seq_q,
                               stats);
    gemm_rs<T, QTile, 1, kDN, kQStep / 16>(dv, st, s_do + buf * QTile::kBytes, 0);
    gemm_rs<T, QTile, 1, kDN, kQStep / 16>(dk, dpt, s_q + buf * QTile::kBytes, 0);

    if (kAtomicDq) {  // dQ rows of this step += dS K; warps split q rows, then d columns
      constexpr int kWarpsQ = kQStep / 16, kWarpsD = 4 / kWarpsQ;
      const int wq = warp % kWarpsQ, wd = warp / kWarpsQ;
      const float one[2] = {1.f, 1.f};
      store_acc<T, DsTile>(smem + (s_ds - s_k), dpt, one, warp * 16);
      __syncthreads();
      float* acc = p.dq_accum + (static_cast<long long>(b) * sh.heads_q + h) * sh.seq_q * kHeadDim;
      // 32 columns at a time keeps the partial product small next to the dK, dV accumulators.
#pragma unroll 1
      for (int d0 = wd * (kHeadDim / kWarpsD); d0 < (wd + 1) * (kHeadDim / kWarpsD); d0 += 32) {
        float dq[1][4][4];
        zero_acc(dq);
#pragma unroll
        for (int kk = 0; kk < kBKV / 16; ++kk) {
          unsigned a[4];
          DsTile::load_a_trans(a, s_ds, kk * 16, wq * 16, lane_id());
#pragma unroll
          for (int np = 0; np < 2; ++np) {
            unsigned bf[4];
            KVTile::load_b_trans(bf, s_k, kk * 16, d0 + np * 16, lane_id());
            ElemOps<T>::mma(dq[0][2 * np], a, bf);
            ElemOps<T>::mma(dq[0][2 * np + 1], a, bf + 2);
          }
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          int q = q0 + wq * 16 + (lane >> 2) + 8 * half;
          if (q < sh.seq_q) {
#pragma unroll
            for (int n = 0; n < 4; ++n) {
              float* dst = acc + static_cast<long long>(q) * kHeadDim + d0 + n * 8 + 2 * (lane & 3);
              atomic_add2(dst, dq[0][n][2 * half], dq[0][n][2 * half + 1]);
            }
          }
        }
      }
    }
    buf ^= 1;
  }

  // Epilogue: dK (times scale) and dV through the now idle K/V tiles.
  cp_async_wait<0>();
  __syncthreads();
  const float ones[2] = {1.f, 1.f}, scales[2] = {sh.scale, sh.scale};
  store_acc<T, KVTile>(smem, dk, scales, warp * 16);
  store_acc<T, KVTile>(smem + KVTile::kBytes, dv, ones, warp * 16);
  __syncwarp();
  store_rows<KVTile, 16, 32>(smem, p.dk.head(b, hk), p.dk.stride_s, warp * 16, kv0, sh.seq_kv,
                             lane);
  store_rows<KVTile, 16, 32>(smem + KVTile::kBytes, p.dv.head(b, hk), p.dv.stride_s, warp * 16, kv0,
                             sh.seq_kv, lane);
}

template <class Prog, class Args, class T, int kHeadDim, bool kAtomicDq,
          int kQStep_ = attn_bwd_q_step<kHeadDim, kAtomicDq>()>
__global__ void __launch_bounds__(128)
    attention_bwd_kernel(const __grid_constant__ AttentionBwdParams p,
                         const __grid_constant__ Args args) {
  attention_bwd_cta<Prog, Args, T, kHeadDim, kAtomicDq, kQStep_>(p, args);
}

// dQ = scale * dq_accum, written in the input dtype. One thread per 8 elements.
template <class T, int kHeadDim>
__device__ __forceinline__ void attention_bwd_dq_convert_cta(const AttentionBwdParams& p) {
  const AttnShape& sh = p.shape;
  long long idx = static_cast<long long>(blockIdx.x) * 256 + threadIdx.x;
  long long row = idx / (kHeadDim / 8);
  if (row >= static_cast<long long>(sh.batch) * sh.heads_q * sh.seq_q) return;
  int d = static_cast<int>(idx % (kHeadDim / 8)) * 8;
  int q = static_cast<int>(row % sh.seq_q);
  int bh = static_cast<int>(row / sh.seq_q), b = bh / sh.heads_q, h = bh % sh.heads_q;
  const float4* src = reinterpret_cast<const float4*>(p.dq_accum + row * kHeadDim + d);
  float4 x = src[0], y = src[1];
  float s = sh.scale;
  uint4 out;
  out.x = ElemOps<T>::pack(x.x * s, x.y * s);
  out.y = ElemOps<T>::pack(x.z * s, x.w * s);
  out.z = ElemOps<T>::pack(y.x * s, y.y * s);
  out.w = ElemOps<T>::pack(y.z * s, y.w * s);
  *reinterpret_cast<uint4*>(p.dq.head(b, h) + q * p.dq.stride_s + d) = out;
}

template <class T, int kHeadDim>
__global__ void __launch_bounds__(256)
    attention_bwd_dq_convert_kernel(const __grid_constant__ AttentionBwdParams p) {
  attention_bwd_dq_convert_cta<T, kHeadDim>(p);
}

template <int kHeadDim>
struct AttnBwdDqSmem {
  using QTile = SwizzledTile<attn_block_q<8, 1>(), kHeadDim>;
  using KVTile = SwizzledTile<kAttnBlockKV, kHeadDim>;
  static constexpr int kBytes = 2 * QTile::kBytes + 4 * KVTile::kBytes;
};

// Deterministic dQ: grid (B * Hq, q_tiles), 256 threads (8 warps of 16 q rows), dynamic shared
// memory AttnBwdDqSmem<D>::kBytes. Needs delta from the preprocess kernel.
template <class Prog, class Args, class T, int kHeadDim>
__device__ __forceinline__ void attention_bwd_dq_cta(const AttentionBwdParams& p,
                                                     const Args& args) {
  using Smem = AttnBwdDqSmem<kHeadDim>;
  using QTile = typename Smem::QTile;
  using KVTile = typename Smem::KVTile;
  constexpr int kThreads = 256, kBQ = attn_block_q<8, 1>(), kBKV = kAttnBlockKV;
  constexpr int kN = kBKV / 8, kDN = kHeadDim / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned s_q = smem_addr(smem), s_do = s_q + QTile::kBytes, s_k = s_do + QTile::kBytes,
                 s_v = s_k + 2 * KVTile::kBytes;

  if (p.mask.block_q != kBQ || p.mask.block_kv != kBKV) __trap();
  const AttnShape& sh = p.shape;
  const int b = blockIdx.x / sh.heads_q, h = blockIdx.x % sh.heads_q;
  const int hk = h / (sh.heads_q / sh.heads_kv);
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kBQ;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const float scale_log2 = sh.scale * kLog2e;
  const unsigned short* gk = p.k.head(b, hk);
  const unsigned short* gv = p.v.head(b, hk);

  QTile::template load_async<kThreads>(s_q, p.q.head(b, h), p.q.stride_s, q0, sh.seq_q);
  QTile::template load_async<kThreads>(s_do, p.d_out.head(b, h), p.d_out.stride_s, q0, sh.seq_q);
  RunCursor cur;
  cur.begin(p.mask.offsets, p.mask.runs, p.mask.list_index(b, h, qt, p.mask.q_tiles));
  if (cur.valid()) {
    KVTile::template load_async<kThreads>(s_k, gk, p.k.stride_s, cur.tile() * kBKV, sh.seq_kv);
    KVTile::template load_async<kThreads>(s_v, gv, p.v.stride_s, cur.tile() * kBKV, sh.seq_kv);
  }
  cp_async_commit();

  float row_lse[2], row_delta[2];
  long long row_base = (static_cast<long long>(b) * sh.heads_q + h) * sh.seq_q;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    int q = q0 + warp * 16 + (lane >> 2) + 8 * half;
    bool in = q < sh.seq_q;
    row_lse[half] = in ? lse_log2(p.lse[row_base + q]) : pos_inf();
    row_delta[half] = in ? p.delta[row_base + q] : 0.f;
  }
  auto stats = [&](int, int, int c, float& l2, float& d) {
    l2 = row_lse[c >> 1];
    d = row_delta[c >> 1];
  };

  float dq[1][kDN][4];
  zero_acc(dq);
  const bool q_interior = q0 + kBQ <= sh.seq_q;
  int buf = 0;
  while (cur.valid()) {
    const int kv0 = cur.tile() * kBKV;
    const bool full = cur.full();
    cp_async_wait<0>();
    __syncthreads();
    cur.next();
    if (cur.valid()) {
      unsigned nb = (buf ^ 1) * KVTile::kBytes;
      KVTile::template load_async<kThreads>(s_k + nb, gk, p.k.stride_s, cur.tile() * kBKV,
                                            sh.seq_kv);
      KVTile::template load_async<kThreads>(s_v + nb, gv, p.v.stride_s, cur.tile() * kBKV,
                                            sh.seq_kv);
    }
    cp_async_commit();
    float s[1][kN][4], dp[1][kN][4];
    zero_acc(s);
    zero_acc(dp);
    gemm_nt<T, QTile, KVTile, 1, kN, kHeadDim / 16>(s, s_q, warp * 16, s_k + buf * KVTile::kBytes,
                                                    0);
    gemm_nt<T, QTile, KVTile, 1, kN, kHeadDim / 16>(dp, s_do, warp * 16, s_v + buf * KVTile::kBytes,
                                                    0);
    tile_bwd<Prog, Args, false>(s, dp, args, sh, scale_log2, b, h, q0 + warp * 16 + (lane >> 2),
                                kv0 + 2 * (lane & 3), full, q_interior && kv0 + kBKV <= sh.seq_kv,
                                stats);
    gemm_rs<T, KVTile, 1, kDN, kBKV / 16>(dq, dp, s_k + buf * KVTile::kBytes, 0);
    buf ^= 1;
  }

  cp_async_wait<0>();
  __syncthreads();
  const float scales[2] = {sh.scale, sh.scale};
  store_acc<T, QTile>(smem, dq, scales, warp * 16);
  __syncwarp();
  store_rows<QTile, 16, 32>(smem, p.dq.head(b, h), p.dq.stride_s, warp * 16, q0, sh.seq_q, lane);
}

template <class Prog, class Args, class T, int kHeadDim>
__global__ void __launch_bounds__(256)
    attention_bwd_dq_kernel(const __grid_constant__ AttentionBwdParams p,
                            const __grid_constant__ Args args) {
  attention_bwd_dq_cta<Prog, Args, T, kHeadDim>(p, args);
}

}  // namespace tjk
