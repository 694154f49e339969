// dQ of the Hopper attention backward (attention_bwd_sm90.cuh) finished where it is summed: the
// last key-block CTA to add into a slab of the fp32 accumulator converts that slab to dQ and
// clears it, so no separate pass reads the accumulator back from memory, and none clears it
// before the next backward.
//
// A slab is 16 q rows by 64 d columns of one (b, q head): exactly what one consumer warp adds per
// step (attn_bwd_sm90_send_dq). attention_bwd_preprocess_kernel sets each slab's counter in
// p.dq_pending to the number of key blocks that visit the slab's q tile (every such CTA adds into
// the slab exactly once) and writes dQ = 0 for the rows of tiles no key block visits. Every
// contributor takes one off the counter once its reduction has completed (its writes performed
// in L2), with release semantics; the one that takes it to zero acquires every other's writes,
// and its warp then reads the slab (from L2, where the reductions just left it), writes dQ =
// scale * slab in the input dtype and writes the slab back to zeros. The accumulator is
// therefore all zeros between launches: the runtime zeroes it once when it allocates it
// (runtime/Attention.cpp) and every launch leaves it so.
//
// To keep the reductions' latency off the consumer's path, the slab a warp sends in one step is
// taken off its counter at its next send (after cp.async.bulk.wait_group 1, which lets only the
// send just made run on), and the counter's answer is read later in that step, after the dQ block
// has been staged, where the warp has registers to spare; there it finishes the slab if it was
// the last. After the loop the CTA drains both (BwdSm90DqSlabs::drain).
//
// Memory model (PTX ISA 8.x, 9.7.9.25 and the memory consistency model): the reductions are
// async-proxy writes; wait_group (not .read) makes them visible to the issuing thread, and a
// fence.proxy.async.global orders them before that thread's generic release (atom.release.gpu).
// The finishing warp's lane 0 observes every other release through the counter it read and
// acquires them with a gpu-scope fence; __syncwarp and a fence in every lane then order the
// warp's loads, which read L2 (ld.global.cg), after them.
#pragma once

#include "attention_bwd.cuh"
#include "tma.cuh"

namespace tjk {

__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// The counter's release: every contributor's, so no acquire (and no L1 invalidation) on the
// consumers' path; the one that finds itself last acquires with a fence (dq_slab_finish).
__device__ __forceinline__ int atomic_add_release_gpu(int* at, int value) {
  int old;
  asm volatile("atom.release.gpu.global.add.s32 %0, [%1], %2;"
               : "=r"(old)
               : "l"(at), "r"(value)
               : "memory");
  return old;
}

__device__ __forceinline__ float4 load_l2(const float* at) {
  float4 v;
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(at)
               : "memory");
  return v;
}

__device__ __forceinline__ void store_zeros_l2(float* at) {
  asm volatile("st.global.cg.v4.f32 [%0], {%1, %1, %1, %1};" ::"l"(at), "f"(0.f) : "memory");
}

// dQ = scale * slab for the slab at rows row0.. and columns col0.. of (b, h), and the slab back to
// zeros, by one warp once it has acquired the slab's last contribution. Each pass over the slab
// covers two of its rows (64 floats each) with 16-byte loads: lane l reads floats 4 (l % 16)..
// of row 2 pass + l / 16; the passes go in two rounds of four loads in flight (the consumers
// have few registers to spare).
template <class T, int kHeadDim>
__device__ __forceinline__ void dq_slab_finish(const AttentionBwdParams& p, int b, int h, int row0,
                                               int col0, int lane) {
  constexpr int kPasses = kDqSlabRows / 2, kInFlight = 4;
  const AttnShape& sh = p.shape;
  // Lane 0 read the counter: its fence acquires the other contributors' releases, and the warp
  // barrier passes that on to every lane before its own fences and loads.
  if (lane == 0) asm volatile("fence.acq_rel.gpu;" ::: "memory");
  __syncwarp();
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  fence_proxy_async_global();
  const int col = col0 + 4 * (lane & 15);
  float* accum = p.dq_accum + (static_cast<long long>(b) * sh.heads_q + h) * sh.seq_q * kHeadDim;
  unsigned short* dq = p.dq.head(b, h);
#pragma unroll 1
  for (int round = 0; round < kPasses; round += kInFlight) {
    float4 v[kInFlight];
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int row = row0 + 2 * (round + i) + (lane >> 4);
      v[i] = row < sh.seq_q ? load_l2(accum + static_cast<long long>(row) * kHeadDim + col)
                            : float4{0.f, 0.f, 0.f, 0.f};
    }
#pragma unroll
    for (int i = 0; i < kInFlight; ++i) {
      const int row = row0 + 2 * (round + i) + (lane >> 4);
      if (row >= sh.seq_q) continue;
      store_zeros_l2(accum + static_cast<long long>(row) * kHeadDim + col);
      const float s = sh.scale;
      *reinterpret_cast<uint2*>(dq + row * p.dq.stride_s + col) =
          uint2{ElemOps<T>::pack(v[i].x * s, v[i].y * s), ElemOps<T>::pack(v[i].z * s, v[i].w * s)};
    }
  }
}

// One warp's slabs on their way through (see the header), as slab indices (dq_slab_index):
// `sent`, added by the warp's last send and maybe still running; `counted`, taken off its counter
// since, with the counter's old value in lane 0's `left`, until the warp finishes it (if it was
// the last contributor) at the next finish point. -1: none. The two indices live in the warp's
// 8 bytes of shared memory (`at`, set to -1 before the first send): the consumers have no
// registers to spare across the step.
struct BwdSm90DqSlabs {
  unsigned at;  // shared-memory address of {sent, counted}
  int left;     // lane 0

  __device__ __forceinline__ int get(int i) const {
    int v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(at + 4 * i) : "memory");
    return v;
  }
  __device__ __forceinline__ void set(int i, int v) const {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(at + 4 * i), "r"(v) : "memory");
  }

  __device__ __forceinline__ void begin(int lane) {
    if (lane < 2) set(lane, -1);
    __syncwarp();
  }
  // Lane 0 takes the sent slab off its counter, once its group has completed (kPending: how many
  // groups sent after it may still run), and makes it the counted one.
  template <int kHeadDim, int kPending>
  __device__ __forceinline__ void count_sent(const AttentionBwdParams& p, int cblk, int lane) {
    if (lane != 0) return;
    const int sent = get(0);
    if (sent >= 0) {
      bulk_wait_group<kPending>();
      fence_proxy_async_global();
      left = atomic_add_release_gpu(p.dq_pending + dq_counter_at<kHeadDim>(sent, cblk), -1);
    }
    set(0, -1);
    set(1, sent);
  }
  // After the warp's send of the slab at rows `row`.. of q head `head` (lane 0's group committed),
  // where no slab is counted and not yet finished: the slab sent before is counted. Rows past Sq
  // are outside the accumulator: such a slab has no counter and is not followed.
  template <int kHeadDim>
  __device__ __forceinline__ void after_send(const AttentionBwdParams& p, int b, int cblk, int head,
                                             int row, int lane) {
    count_sent<kHeadDim, 1>(p, cblk, lane);
    if (lane == 0 && row < p.shape.seq_q) set(0, dq_slab_index(p.shape, b, head, row));
    __syncwarp();
  }
  // A finish point, where the warp has registers to spare: the counted slab is finished here if
  // this warp was its last contributor.
  template <class T, int kHeadDim>
  __device__ __forceinline__ void finish_counted(const AttentionBwdParams& p, int b, int cblk,
                                                 int lane) {
    const int counted = get(1);
    if (counted < 0) return;
    if (__shfl_sync(0xffffffffu, left, 0) == 1) {
      const int slabs = (p.shape.seq_q + kDqSlabRows - 1) / kDqSlabRows;
      const int head = counted / slabs % p.shape.heads_q;
      dq_slab_finish<T, kHeadDim>(p, b, head, counted % slabs * kDqSlabRows, kDqSlabCols * cblk,
                                  lane);
    }
    __syncwarp();
    if (lane == 0) set(1, -1);
    __syncwarp();
  }
  // After the CTA's last send, once lane 0 has waited for all its groups: both slabs finished.
  template <class T, int kHeadDim>
  __device__ __forceinline__ void drain(const AttentionBwdParams& p, int b, int cblk, int lane) {
    finish_counted<T, kHeadDim>(p, b, cblk, lane);
    count_sent<kHeadDim, 0>(p, cblk, lane);
    __syncwarp();
    finish_counted<T, kHeadDim>(p, b, cblk, lane);
  }
};

}  // namespace tjk
