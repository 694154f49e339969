// The consumers' item epilogue of the Hopper attention forward (attention_fwd_sm90.cuh, whose
// note at attn_sm90_consume gives the schedule): the named barriers of the consumer warpgroups,
// the item whose epilogue is pending, the epilogue itself (normalise O, stage it in shared memory,
// 16-byte stores, lse) and that of an item without kv steps.
#pragma once

#include "attention_fwd_sm90_ring.cuh"

namespace tjk {

// Named barriers: the issue turns of the two consumer warpgroups, and consumer 1's "my last S
// has landed" for consumer 0's epilogue (see below), two of them taken by the CTA's items in
// turn: consumer 1 may reach its next item's end (a one-step item, where nothing after its first
// turn waits for consumer 0) before consumer 0 has waited on this item's, and a second arrive on
// the same barrier would complete it without consumer 0.
constexpr int kSchedBarrier = 1;     // + consumer index
constexpr int kLastSBarrier = 5;     // + (the item's index in the CTA & 1)

// An item whose last softmax is done and whose last P V and epilogue are left to the next
// item's start (attn_sm90_consume): its rows, the ring stage of its last step, and that step's P
// (A fragments), rescale factors and tile count, and its index in the CTA.
struct FwdPendingItem {
  FwdWorkItem w;
  int stage, tiles, nth;
  unsigned pf[8][4];
  int accumulate;  // whether O holds an earlier P V of the item (else its last P V overwrites O)
  bool valid = false;
};

// A consumer warpgroup's epilogue for item w: normalise O, stage the warpgroup's rows in shared
// memory at `stage_base` (Q's geometry, one stmatrix per k16 slice of O's normalised 16-bit
// fragments: what a TMA load of its boxes would write), then one TMA store per 64-column block
// and warp, of the warp's own 16 rows, from its first lane (rows past seq_q are skipped by the
// map): no barrier beyond the warp's. lse from the lanes holding column 0. `release` (an
// mbarrier) is arrived on once the staged rows are read: by the storing lanes once their bulk
// groups have read them, by the others at once.
template <class T, int kHeadDim>
__device__ __forceinline__ void attn_sm90_epilogue(const AttentionFwdParams& p,
                                                   const AttnFwdTmaMaps& maps,
                                                   const FwdWorkItem& w, int cw,
                                                   const float (&o)[kHeadDim / 8][4],
                                                   OnlineSoftmax<1>& sm, unsigned stage_base,
                                                   unsigned release) {
  using L = AttnFwdSm90Layout<kHeadDim>;
  constexpr int kDN = kHeadDim / 8;
  const AttnShape& sh = p.shape;
  const int thread = threadIdx.x & 127, warp = thread >> 5, lane = threadIdx.x & 31;
  const int row0 = w.q0 + 64 * cw + 16 * warp + (lane >> 2);
  float inv[2], lse[2];
  sm.finish(inv, lse);
  unsigned f[kDN / 2][4];  // O normalised, as 16-bit A fragments (attn_sm90_pack_p's order)
#pragma unroll
  for (int kk = 0; kk < kDN / 2; ++kk)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float(&on)[4] = o[2 * kk + half];
      f[kk][2 * half] = ElemOps<T>::pack(on[0] * inv[0], on[1] * inv[0]);
      f[kk][2 * half + 1] = ElemOps<T>::pack(on[2] * inv[1], on[3] * inv[1]);
    }
  stmatrix_rows_sw128(stage_base, f, 64 * cw + 16 * warp, lane);
  fence_proxy_async_shared();  // the staged rows, for the TMA store
  __syncwarp();
  if (lane == 0) {
    const int r = 64 * cw + 16 * warp;
#pragma unroll
    for (int cb = 0; cb < L::kColBlocks; ++cb)
      tma_store_4d(&maps.out, stage_base + cb * L::kColBlockBytes + r * 128, 64 * cb, w.q0 + r,
                   w.h, w.b);
    bulk_commit_group();
    bulk_wait_group_read<0>();
  }
  mbar_arrive(release);
  if ((lane & 3) == 0) {
    float* out_lse = p.lse + (static_cast<long long>(w.b) * sh.heads_q + w.h) * sh.seq_q;
    if (row0 < sh.seq_q) out_lse[row0] = lse[0];
    if (row0 + 8 < sh.seq_q) out_lse[row0 + 8] = lse[1];
  }
}

// The epilogue of an item without kv steps (every row masked): zeros for its rows' output, -inf
// for their lse, straight from registers (no staging: a second instance of the staged epilogue
// in the item loop took its run cursor and descriptors out of ptxas's uniform datapath).
template <int kHeadDim>
__device__ __forceinline__ void attn_sm90_empty_rows(const AttentionFwdParams& p,
                                                     const FwdWorkItem& w, int cw) {
  constexpr int kDN = kHeadDim / 8;
  const AttnShape& sh = p.shape;
  const int thread = threadIdx.x & 127;
  unsigned short* out = p.out.head(w.b, w.h);
#pragma unroll
  for (int i = 0; i < 64 * kDN / 128; ++i) {
    const int idx = i * 128 + thread, r = w.q0 + 64 * cw + idx / kDN, chunk = idx % kDN;
    if (r < sh.seq_q)
      *reinterpret_cast<uint4*>(out + r * p.out.stride_s + chunk * 8) = make_uint4(0, 0, 0, 0);
  }
  if (thread < 64 && w.q0 + 64 * cw + thread < sh.seq_q)
    p.lse[(static_cast<long long>(w.b) * sh.heads_q + w.h) * sh.seq_q + w.q0 + 64 * cw + thread] =
        neg_inf();
}

// The epilogue of `pending` (if any), once its last P V has landed: `kInFlight` products issued
// after it may still run. Its rows are staged in the K tile of its last stage, which both
// warpgroups' last S products read: consumer 1 gets here after consumer 0 has passed the turn
// that follows its last softmax (so after consumer 0's last S landed); consumer 0 waits for
// consumer 1's arrival on kLastSBarrier. The stage is released once the staged rows are read.
template <class T, int kHeadDim, int kInFlight>
__device__ __forceinline__ void attn_sm90_finish_pending(const AttentionFwdParams& p,
                                                         const AttnFwdTmaMaps& maps,
                                                         FwdPendingItem& pending, unsigned base,
                                                         int cw, float (&o)[kHeadDim / 8][4],
                                                         OnlineSoftmax<1>& sm) {
  using L = AttnFwdSm90Layout<kHeadDim>;
  // The wait is on every path: one behind a branch makes ptxas add its own on the other paths
  // (O is written there while, as far as it can tell, a product into O may still run) and
  // serialise every wgmma of the kernel.
  if constexpr (kInFlight >= 0) wgmma_wait<kInFlight>();  // -1: the caller has waited
  pin_registers(o);
  if (!pending.valid) return;
  if (cw == 0) named_barrier_sync(kLastSBarrier + (pending.nth & 1), 256);
  attn_sm90_epilogue<T, kHeadDim>(p, maps, pending.w, cw, o, sm, L::k_tile(base, pending.stage),
                                  L::empty(base, pending.stage));
  pending.valid = false;
}

}  // namespace tjk
