// The consumers' outputs of the Hopper attention backward (attention_bwd_sm90.cuh): a step's dQ
// block staged in shared memory and added into dq_accum by TMA, and an item's dK and dV rows
// stored at its end.
#pragma once

#include "attention_bwd_sm90_ring.cuh"

namespace tjk {

// Stores a 64 x 64 dQ accumulator block (this thread: rows 16 warp + g (+ 8), columns 8n + 2t
// (+ 1)) into a dQ buffer (generic pointer into shared memory) as the TMA reduction reads it: two
// boxes of 32 columns, rows of 128 bytes, 16-byte chunk c of row r at chunk c ^ (r & 7). A warp's
// 8-byte stores of one n fill two 128-byte wavefronts without conflicts.
__device__ __forceinline__ void attn_bwd_sm90_store_dq(unsigned char* block,
                                                       const float (&dq)[8][4], int warp,
                                                       int lane) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * warp + (lane >> 2) + 8 * h;
      const int chunk = 2 * (n & 3) + ((lane & 3) >> 1);
      const int at = (n >> 2) * (64 * 128) + r * 128 + ((chunk ^ (r & 7)) << 4) + ((lane & 1) << 3);
      *reinterpret_cast<float2*>(block + at) = make_float2(dq[n][2 * h], dq[n][2 * h + 1]);
    }
}

// Adds this warp's 16 rows of consumer cw's dQ block (stored and fenced by the warp's lanes, which
// then met at __syncwarp) into dq_accum: two TMA reductions (f32 add in L2) of 16 rows by 32
// columns, at rows q0 + 16 warp.. of q head `head` (rows past Sq are outside the map and
// skipped), by lane 0, one bulk group. The rows may be rewritten once bulk_wait_group_read says
// the group was read.
template <int kHeadDim>
__device__ __forceinline__ void attn_bwd_sm90_send_dq(const AttnBwdTmaMaps& maps, unsigned base,
                                                      int cw, int warp, int b, int head, int q0) {
  using L = AttnBwdSm90Layout<kHeadDim>;
  const unsigned src = L::dq_block(base, cw) + warp * L::kDqWarpBytes;
  const int d0 = kHeadDim == 128 ? 64 * cw : 0, row = q0 + L::kDqWarpRows * warp;
  tma_reduce_add_4d(&maps.dq_accum, src, d0, row, head, b);
  tma_reduce_add_4d(&maps.dq_accum, src + L::kDqBoxBytes, d0 + 32, row, head, b);
  bulk_commit_group();
}

// An item's end: the consumer's 64 keys of dK (times the softmax scale) and dV, 16 bytes per
// store. A quad's four lanes hold one key row's pairs of columns 8n + 2t; across four n the quad
// exchanges them (quad_transpose; tests/models/quad_transpose.py) so that lane t holds columns
// 8n' .. 8n' + 7 of n' = 4k + t, and each warp store writes eight full 64-byte runs (four times
// fewer stores than pairs, every sector written whole). Every lane shuffles; only keys below
// seq_kv are stored. dK and dV rows are 16-byte aligned (the attention checks ask it of every GPU
// tensor). This thread's keys: row0 and row0 + 8.
template <class T, int kDN>
__device__ __forceinline__ void attn_bwd_sm90_store_dk_dv(const AttentionBwdParams& p,
                                                          const float (&dk)[kDN][4],
                                                          const float (&dv)[kDN][4], int b, int hk,
                                                          int row0, int lane) {
  const AttnShape& sh = p.shape;
  unsigned short* gdk = p.dk.head(b, hk);
  unsigned short* gdv = p.dv.head(b, hk);
  const int quad_lane = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int kv = row0 + 8 * half;
#pragma unroll
    for (int k = 0; k < kDN / 4; ++k) {
      unsigned wk[4], wv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float* ak = dk[4 * k + j];
        const float* av = dv[4 * k + j];
        wk[j] = ElemOps<T>::pack(ak[2 * half] * sh.scale, ak[2 * half + 1] * sh.scale);
        wv[j] = ElemOps<T>::pack(av[2 * half], av[2 * half + 1]);
      }
      quad_transpose(wk, quad_lane);
      quad_transpose(wv, quad_lane);
      if (kv >= sh.seq_kv) continue;
      const int col = 8 * (4 * k + quad_lane);
      *reinterpret_cast<uint4*>(gdk + kv * p.dk.stride_s + col) =
          make_uint4(wk[0], wk[1], wk[2], wk[3]);
      *reinterpret_cast<uint4*>(gdv + kv * p.dv.stride_s + col) =
          make_uint4(wv[0], wv[1], wv[2], wv[3]);
    }
  }
}

}  // namespace tjk
