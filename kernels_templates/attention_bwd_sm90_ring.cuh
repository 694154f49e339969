// The producer side of the Hopper attention backward (attention_bwd_sm90.cuh, whose header
// comment gives the whole protocol): the CTA shape, the tensor maps, the shared-memory layout, the
// step records the producer writes for the consumers, the cursor over the transposed block-mask
// runs, and the producer warp itself.
#pragma once

#include "attention_bwd.cuh"
#include "attention_fwd_sm90_ring.cuh"  // RingSlot

namespace tjk {

constexpr int kAttnBwdSm90Threads = 384;
constexpr int kAttnBwdSm90BlockKV = 128;  // keys per CTA: two block-mask kv tiles
// Named barriers of the consumers (atomic dQ). Consumer cw arrives at kBwdReadyBarrier + 2 cw +
// (j & 1) once its half of step j's dS^T is in the buffer, and at kBwdReadBarrier + 2 cw + (j & 1)
// once its dQ product of step j has landed; the other consumer syncs on them before its dQ
// product of step j (one step later) and before it rewrites that buffer (two steps later). The
// parity in the id keeps an arrival for step j + 2 from completing step j's barrier: a consumer
// arrives for j + 2 only after a barrier the other passes after its sync for j.
constexpr int kBwdReadyBarrier = 4;     // 4 .. 7
constexpr int kBwdReadBarrier = 8;      // 8 .. 11
constexpr int kBwdStaggerBarrier = 12;  // consumer 1 starts after consumer 0's first dS^T

// The tensor maps of Q, K, V and dO: 4-D over (d, s, h, b), 64 x 64 boxes, 128-byte swizzle;
// and of the fp32 dQ accumulator [B, Hq, Sq, D], the same dims in 32 x 16 boxes (128 bytes of
// 32 floats per row, 128-byte swizzle), which the dQ blocks are added into.
struct AttnBwdTmaMaps {
  TmaDescriptor q, k, v, d_out, dq_accum;
};

// Shared memory, from a 1024-B aligned base: a block of mbarriers, step records and every stage's
// lse and delta; the K and V tiles; two dS^T buffers; the two consumers' dQ blocks (fp32, as two
// 32-column TMA boxes each); then per stage the Q and dO tiles of one step. At D = 128 this is
// exactly the 227 KiB a CTA may have (the base's alignment slack included).
template <int kHeadDim>
struct AttnBwdSm90Layout {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the Hopper kernel supports D = 64 and 128");
  static constexpr int kQStep = 64;  // q rows per step: half a block-mask q tile
  static constexpr int kStages = kHeadDim == 128 ? 3 : 4;
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kBoxBytes = 64 * 128;          // one TMA box: 64 rows of 64 elements
  static constexpr int kKvColBlockBytes = 128 * 128;  // 128 key rows of one column block
  static constexpr int kKvTileBytes = kColBlocks * kKvColBlockBytes;
  static constexpr int kQColBlockBytes = kQStep * 128;
  static constexpr int kQTileBytes = kColBlocks * kQColBlockBytes;
  static constexpr int kDsBytes = kQStep / 64 * kKvColBlockBytes;  // 128 kv rows x kQStep q
  static constexpr int kDqBlockBytes = kQStep * 64 * 4;            // kQStep q x 64 d, fp32
  static constexpr int kDqBoxBytes = kQStep * 128;                 // kQStep rows of 32 floats
  static constexpr int kDqWarpRows = 16;                           // one warp's rows of a block
  static constexpr int kDqWarpBytes = kDqWarpRows * 128;           // of one box: 2 x 1024 B
  static constexpr int kStatsBytes = 2 * kQStep * 4;               // lse, then delta
  static constexpr int kStats0 = 512;                              // in the barrier block
  static constexpr int kProfile = 320;  // after the step records: 2 x 64 B (TJ_BWD_SM90_PROFILE)
  static_assert(256 + 16 * kStages <= kProfile && kProfile + 128 <= kStats0, "barrier block");
  static constexpr int kBarrierBlockBytes = (kStats0 + kStages * kStatsBytes + 1023) / 1024 * 1024;
  static constexpr int kStageBytes = 2 * kQTileBytes;
  static constexpr int kK = kBarrierBlockBytes;
  static constexpr int kV = kK + kKvTileBytes;
  static constexpr int kDs = kV + kKvTileBytes;
  static constexpr int kDq = kDs + 2 * kDsBytes;
  static constexpr int kStage0 = kDq + 2 * kDqBlockBytes;
  // Up to 1023 bytes are lost aligning the dynamic shared memory base.
  static constexpr int kBytes = 1024 + kStage0 + kStages * kStageBytes;
  static_assert(kBytes <= 227 * 1024, "a CTA's shared memory on sm_90");

  // Barrier addresses: kv_full, full[kStages], empty[kStages], kv_empty, item_full[2],
  // item_empty[2]; then the words the work items' indices pass through.
  __device__ static unsigned kv_full(unsigned base) { return base; }
  __device__ static unsigned full(unsigned base, int s) { return base + 8 + 8 * s; }
  __device__ static unsigned empty(unsigned base, int s) { return base + 8 + 8 * (kStages + s); }
  __device__ static unsigned kv_empty(unsigned base) { return base + 8 + 16 * kStages; }
  __device__ static unsigned item_full(unsigned base, int i) {
    return base + 16 + 16 * kStages + 8 * i;
  }
  __device__ static unsigned item_empty(unsigned base, int i) {
    return base + 32 + 16 * kStages + 8 * i;
  }
  static constexpr int kItemQueue = 192;  // two ints: the producer's item indices, for the loader
  static constexpr int kKvItem = 200;     // the item whose K and V kv_full publishes
  static_assert(48 + 16 * kStages <= kItemQueue, "barrier block");
  // Byte offset from the base of a stage's step record (BwdSm90Step, 16 B), in the barrier block.
  __device__ static int step_record(int s) { return 256 + 16 * s; }
  __device__ static unsigned q_tile(unsigned base, int s) {
    return base + kStage0 + s * kStageBytes;
  }
  __device__ static unsigned do_tile(unsigned base, int s) { return q_tile(base, s) + kQTileBytes; }
  __device__ static unsigned dq_block(unsigned base, int cw) {
    return base + kDq + cw * kDqBlockBytes;
  }
  // Byte offset from the base of a stage's lse (kQStep floats, delta right after).
  __device__ static int stats(int s) { return kStats0 + s * kStatsBytes; }
};

// How one consumer's 64 keys relate to the q tile of a step.
enum BwdTileClass : int { kBwdEmpty = 0, kBwdPartial = 1, kBwdFull = 2 };

// One step: kQStep rows of q head `head` from q0, and the class of each 64-key half. The
// producer writes it into the stage's record before the stage's full barrier completes, so the
// consumers carry no run-list state; head < 0 marks the end.
struct alignas(16) BwdSm90Step {
  int head, q0;
  int cls[2];
};

// The steps of one CTA: per q head of the GQA group, the union of the transposed runs of the
// CTA's two kv tiles, q tile by q tile, each split into kSub steps. Walked by the producer.
template <int kSub>
struct BwdSm90Cursor {
  RunCursor half[2];
  const BlockMaskView* mask;
  int b, kt0, head, last_head, sub, tile;
  bool two;  // the second kv tile exists (Skv may end within the first)

  __device__ __forceinline__ void begin(const BlockMaskView& m, int b_, int first_head, int n_heads,
                                        int kt0_) {
    mask = &m, b = b_, kt0 = kt0_, head = first_head, last_head = first_head + n_heads - 1;
    two = kt0 + 1 < m.kv_tiles;
    sub = 0;
    open_head();
  }
  __device__ __forceinline__ void open_head() {
    for (;;) {
      half[0].begin(mask->t_offsets, mask->t_runs, mask->list_index(b, head, kt0, mask->kv_tiles));
      if (two)
        half[1].begin(mask->t_offsets, mask->t_runs,
                      mask->list_index(b, head, kt0 + 1, mask->kv_tiles));
      else
        half[1].left = 0;
      if (valid()) {
        pick();
        return;
      }
      if (head == last_head) return;
      ++head;
    }
  }
  __device__ __forceinline__ bool valid() const { return half[0].valid() || half[1].valid(); }
  __device__ __forceinline__ void pick() {
    tile = !half[0].valid()   ? half[1].tile()
           : !half[1].valid() ? half[0].tile()
                              : min(half[0].tile(), half[1].tile());
  }
  __device__ __forceinline__ int class_of(int i) const {
    if (!half[i].valid() || half[i].tile() != tile) return kBwdEmpty;
    return half[i].full() ? kBwdFull : kBwdPartial;
  }
  template <int kQStep>
  __device__ __forceinline__ BwdSm90Step step() const {
    return {head, tile * (kSub * kQStep) + sub * kQStep, {class_of(0), class_of(1)}};
  }
  __device__ __forceinline__ void next() {
    if (++sub < kSub) return;
    sub = 0;
    const int t = tile;
#pragma unroll
    for (int i = 0; i < 2; ++i)
      if (half[i].valid() && half[i].tile() == t) half[i].next();
    if (valid()) {
      pick();
    } else if (head < last_head) {
      ++head;
      open_head();
    }
  }
};

template <int kHeadDim>
using BwdSm90CursorFor = BwdSm90Cursor<attn_block_q<8, 1>() / AttnBwdSm90Layout<kHeadDim>::kQStep>;

// A work item: one key block (two block-mask kv tiles) of one (b, hk). Numbered as a grid of one
// CTA per item would start them, in bands of key_band key blocks: band g's key blocks g * band ..
// g * band + width - 1 (width = band but for a narrower last band) of every (b, hk) in turn, so
// that the items of one head which run together walk the same q tiles close together in time.
// The CTAs take them in that order from the counter p.work[0], one at a time as each finishes
// the steps of its item before, as a grid's CTAs would start: a fixed share per CTA (item c,
// c + G, ...) let the CTAs of one head drift apart, and the causal backward at 8k read twice the
// bytes from memory (L2 hits 72% -> 46%) and ran 32% slower (bench/NOTES.md).
struct BwdSm90Item {
  int b, hk, kt0;

  __device__ __forceinline__ static BwdSm90Item at(const AttentionBwdParams& p, int item) {
    const int heads = p.shape.batch * p.shape.heads_kv, blocks = (p.mask.kv_tiles + 1) / 2;
    const int band = p.key_band, first = item / (heads * band) * band;
    const int width = min(band, blocks - first);  // the last band may be narrower
    const int in_band = item - first * heads, bh = in_band / width;
    return {bh / p.shape.heads_kv, bh % p.shape.heads_kv, 2 * (first + in_band % width)};
  }
  __device__ __forceinline__ int kv0() const { return kt0 * kAttnBlockKV; }
};

// The K / V loader (one thread). Per work item it takes the index the ring producer handed on
// (item_full / item_empty, two slots), waits until the consumers are done with the item before's
// K and V (kv_empty), so they load under that item's epilogue, and publishes the index with them
// (kv_full). The index past the end goes to the consumers with a plain arrive: they stop there.
template <int kHeadDim>
__device__ __forceinline__ void attn_bwd_sm90_load_kv(const AttentionBwdParams& p,
                                                      const AttnBwdTmaMaps& maps, unsigned base) {
  using L = AttnBwdSm90Layout<kHeadDim>;
  if (p.items > 0) {
    tma_prefetch_descriptor(&maps.k);
    tma_prefetch_descriptor(&maps.v);
  }
  for (unsigned n = 0;; ++n) {
    mbar_wait(L::item_full(base, n & 1), (n >> 1) & 1);
    const int item = ld_shared_u32(base + L::kItemQueue + 4 * (n & 1));
    mbar_arrive(L::item_empty(base, n & 1));
    mbar_wait(L::kv_empty(base), (n & 1) ^ 1);
    st_shared_u32(base + L::kKvItem, item);
    if (item >= p.items) {
      mbar_arrive(L::kv_full(base));
      return;
    }
    const BwdSm90Item w = BwdSm90Item::at(p, item);
    mbar_arrive_expect_tx(L::kv_full(base), 2 * L::kKvTileBytes);
#pragma unroll
    for (int cb = 0; cb < L::kColBlocks; ++cb)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const unsigned at = cb * L::kKvColBlockBytes + half * L::kBoxBytes;
        tma_load_4d(base + L::kK + at, &maps.k, 64 * cb, w.kv0() + 64 * half, w.hk, w.b,
                    L::kv_full(base));
        tma_load_4d(base + L::kV + at, &maps.v, 64 * cb, w.kv0() + 64 * half, w.hk, w.b,
                    L::kv_full(base));
      }
  }
}

// The ring producer warp: takes the work items from the counter (lane 0's atomic, broadcast), and
// hands each index on to the K / V loader; per item, Q, dO (lane 0, TMA), lse and delta (every
// lane, cp.async) of every step, then a closing record (head = -1). The ring runs on across
// items. The next item is taken once the item's last step is in the ring: the consumers still
// have the ring's steps to go, which hide the atomic's latency. Its last act is counting the CTA
// done (p.work[1]); the last CTA to do so resets both counters for the next launch (every CTA
// took its last index before).
template <int kHeadDim>
__device__ __forceinline__ void attn_bwd_sm90_produce(const AttentionBwdParams& p,
                                                      const AttnBwdTmaMaps& maps, unsigned base,
                                                      unsigned char* smem, int lane) {
  using L = AttnBwdSm90Layout<kHeadDim>;
  constexpr int kQ = L::kQStep;
  const AttnShape& sh = p.shape;
  const int group = sh.heads_q / sh.heads_kv;
  if (lane == 0 && sh.seq_q > 0) {  // without q rows Q and dO may have no map
    tma_prefetch_descriptor(&maps.q);
    tma_prefetch_descriptor(&maps.d_out);
  }
  auto take = [&] { return __shfl_sync(0xffffffffu, lane == 0 ? atomicAdd(p.work, 1) : 0, 0); };
  // The whole warp waits for the slot (a wait in lane 0 alone, a divergent loop, made ptxas spill
  // 232 bytes at 24 registers).
  auto hand_on = [&](unsigned n, int item) {
    mbar_wait(L::item_empty(base, n & 1), ((n >> 1) & 1) ^ 1);
    if (lane == 0) {
      st_shared_u32(base + L::kItemQueue + 4 * (n & 1), item);
      mbar_arrive(L::item_full(base, n & 1));
    }
  };
  RingSlot slot;
  int item = take();
  for (unsigned n = 0;; ++n) {
    hand_on(n, item);
    if (item >= p.items) break;
    BwdSm90CursorFor<kHeadDim> steps;
    {
      const BwdSm90Item w = BwdSm90Item::at(p, item);
      steps.begin(p.mask, w.b, w.hk * group, group, w.kt0);
    }
    const int b = steps.b;  // the cursor's copy (one register fewer at 24)
    for (; steps.valid(); steps.next()) {
      const BwdSm90Step st = steps.template step<kQ>();
      if (st.q0 >= sh.seq_q) continue;  // the second half of a last q tile that ends early
      const unsigned full = L::full(base, slot.stage);
      mbar_wait(L::empty(base, slot.stage), slot.parity ^ 1);
      if (lane == 0) {
        *reinterpret_cast<BwdSm90Step*>(smem + L::step_record(slot.stage)) = st;
        mbar_arrive_expect_tx(full, 2 * L::kQTileBytes);
#pragma unroll
        for (int cb = 0; cb < L::kColBlocks; ++cb)
#pragma unroll
          for (int half = 0; half < kQ / 64; ++half) {
            const unsigned at = cb * L::kQColBlockBytes + half * L::kBoxBytes;
            const int row = st.q0 + 64 * half;
            tma_load_4d(L::q_tile(base, slot.stage) + at, &maps.q, 64 * cb, row, st.head, b, full);
            tma_load_4d(L::do_tile(base, slot.stage) + at, &maps.d_out, 64 * cb, row, st.head, b,
                        full);
          }
      }
      // lse (log2 domain) then delta of the step's rows; rows past Sq read as 0 (their P is 0 by
      // the bounds).
      const long long row_base = (static_cast<long long>(b) * sh.heads_q + st.head) * sh.seq_q;
#pragma unroll
      for (int j = 0; j < 2 * kQ / 32; ++j) {
        const int i = 32 * j + lane, q = st.q0 + (i % kQ);
        const bool in = q < sh.seq_q;
        const float* src = i < kQ ? p.lse_log2 : p.delta;
        cp_async_4(base + L::stats(slot.stage) + 4 * i, src + (in ? row_base + q : 0), in ? 4 : 0);
      }
      cp_async_mbar_arrive_noinc(full);
      slot.advance<L::kStages>();
    }
    item = take();
    // The item's end: a record with head = -1 and the same 33 arrivals, without bytes.
    mbar_wait(L::empty(base, slot.stage), slot.parity ^ 1);
    if (lane == 0) {
      *reinterpret_cast<BwdSm90Step*>(smem + L::step_record(slot.stage)) =
          BwdSm90Step{-1, 0, {0, 0}};
      mbar_arrive(L::full(base, slot.stage));
    }
    mbar_arrive(L::full(base, slot.stage));
    slot.advance<L::kStages>();
  }
  if (lane == 0 && atomicAdd(p.work + 1, 1) == static_cast<int>(gridDim.x) - 1) {
    atomicExch(p.work, 0);
    atomicExch(p.work + 1, 0);
  }
  cp_async_wait_all();
}

}  // namespace tjk
