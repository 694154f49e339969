// The producer side of the Hopper attention forward (attention_fwd_sm90.cuh, whose header
// comment gives the whole protocol): the CTA shape, the tensor maps, the shared-memory layout,
// the kv steps and their cursor over the block-mask runs, the work items and how CTAs share them,
// the ring's slots, and the producer thread itself.
#pragma once

#include "attention_fwd.cuh"
#include "tma.cuh"
#include "wgmma.cuh"

namespace tjk {

constexpr int kAttnFwdSm90Threads = 384;
constexpr int kAttnSm90BlockQ = 128;

// The tensor maps of Q, K, V and the output: 4-D over (d, s, h, b), 64 x 64 boxes (the
// output's 64 x 16: one warp's rows), 128-byte swizzle.
struct AttnFwdTmaMaps {
  TmaDescriptor q, k, v, out;
};

// Shared memory, from a 1024-B aligned base: a block of mbarriers, the Q tile, then per stage
// the K and the V tile of one step. A tile is kHeadDim / 64 column blocks of 128 rows x 128 B.
template <int kHeadDim>
struct AttnFwdSm90Layout {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "the Hopper kernel supports D = 64 and 128");
  static constexpr int kStages = kHeadDim == 128 ? 3 : 4;
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kBoxBytes = 64 * 128;        // one TMA box: 64 rows of 64 elements
  static constexpr int kColBlockBytes = 128 * 128;  // 128 rows of one column block
  static constexpr int kTileBytes = kColBlocks * kColBlockBytes;
  static constexpr int kItems = 512;  // in the barrier block: two item indices (item n: n & 1)
  static constexpr int kItemHasSteps = 520;  // whether the item whose Q is loading has kv steps
  static constexpr int kStepRecords = 528;   // per stage, the step it holds (KvStep::record)
  static constexpr int kQ = 1024;     // after the barrier block
  static constexpr int kStage0 = kQ + kTileBytes;
  static constexpr int kStageBytes = 2 * kTileBytes;  // K then V
  // Up to 1023 bytes are lost aligning the dynamic shared memory base.
  static constexpr int kBytes = 1024 + kStage0 + kStages * kStageBytes;

  // Barrier addresses: q_full, full[kStages], empty[kStages], q_empty, item_full[2].
  __device__ static unsigned q_full(unsigned base) { return base; }
  __device__ static unsigned full(unsigned base, int s) { return base + 8 + 8 * s; }
  __device__ static unsigned empty(unsigned base, int s) { return base + 8 + 8 * (kStages + s); }
  __device__ static unsigned q_empty(unsigned base) { return base + 8 + 16 * kStages; }
  __device__ static unsigned item_full(unsigned base, int n) {
    return base + 16 + 16 * kStages + 8 * (n & 1);
  }
  __device__ static unsigned k_tile(unsigned base, int s) {
    return base + kStage0 + s * kStageBytes;
  }
  __device__ static unsigned v_tile(unsigned base, int s) { return k_tile(base, s) + kTileBytes; }
};

// One step of the kv loop: `tiles` (1 or 2) consecutive block-mask tiles from `tile`, all full
// or all partial; `last` on an item's last step. The producer publishes each step as a record
// with its stage, so the consumers never walk the runs themselves.
struct KvStep {
  int tile, tiles;
  bool full, last;

  __device__ __forceinline__ int record() const {
    return tile << 3 | (last ? 4 : 0) | (full ? 2 : 0) | (tiles - 1);
  }
  // Read by all 32 lanes from one shared address: ptxas treats the value as warp-uniform, so the
  // consumers' branches on it stay uniform (a shuffle from lane 0 gave the same SASS).
  __device__ __forceinline__ static KvStep from_record(const volatile int* at) {
    const int r = *at;
    return {r >> 3, (r & 1) + 1, (r & 2) != 0, (r & 4) != 0};
  }
};

// Groups the tiles of a block-mask run list into steps (the producer's walk).
struct KvStepCursor {
  RunCursor runs;
  KvStep step;

  __device__ __forceinline__ void begin(const BlockMaskView& m, int b, int h, int qt) {
    runs.begin(m.offsets, m.runs, m.list_index(b, h, qt, m.q_tiles));
    advance();
  }
  __device__ __forceinline__ bool valid() const { return step.tiles > 0; }
  __device__ __forceinline__ void advance() {
    step.tiles = 0;
    if (!runs.valid()) return;
    step.tile = runs.tile();
    step.full = runs.full();
    step.tiles = 1;
    runs.next();
    if (runs.valid() && runs.tile() == step.tile + 1 && runs.full() == step.full) {
      step.tiles = 2;
      runs.next();
    }
    step.last = !runs.valid();  // the cursor already stands on the next step's first tile
  }
};

// The work items (b, h, q tile), numbered longest first for triangular masks and in bands of
// p.q_band q tiles: band g holds q tiles g * band .. g * band + band - 1 counted from the last,
// every (b, h) in turn with its band's q tiles next to each other. The items of one (b, h) that
// run together read the same K and V tiles in the same order, so those come from L2: with a
// band of 1 (every (b, h) of a q tile next to each other) a causal mask at S 2k, B 8, H 16 had
// 132 CTAs on 132 different heads, each reading its K and V from memory (bench/NOTES.md,
// thirtieth session). The runtime picks the band (runtime/AttentionSchedule.cpp).
// Two ways to share them out, the runtime's choice (p.work):
//   - fixed shares (p.work null), where the items never grow in that order: CTA c takes, in round
//     k = 0, 1, ..., item k * G + c when k is even and k * G + G - 1 - c when k is odd
//     (G = gridDim.x). A plain stride would give CTA 0 the largest item of every round (6% more
//     work than the average on a causal mask at 8k); the snake pairs a larger with a smaller,
//     and the CTAs sharing K and V stay in step.
//   - one at a time from the counter p.work[0], in order, elsewhere: a document mask's items
//     follow the documents, not the q tile, and fixed shares left its SMs 11% idle at the end.
struct FwdWorkItem {
  int b, h, hk, qt, q0;

  __device__ __forceinline__ static int count(const AttentionFwdParams& p) {
    return p.shape.batch * p.shape.heads_q * p.mask.q_tiles;
  }
  // This CTA's n-th item with fixed shares (>= count(p) once the CTA is done).
  __device__ __forceinline__ static int fixed_share(int n) {
    return n * gridDim.x + ((n & 1) ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
  }
  // The producer's next item: from the counter, or the CTA's n-th fixed share. The counter's
  // value goes through a shuffle, so ptxas treats it as warp-uniform: without it the consumers'
  // run cursors left the uniform registers too (their SASS, with fixed shares as well), and the
  // D = 64 causal forward ran 3% slower.
  __device__ __forceinline__ static int take(const AttentionFwdParams& p, int n) {
    return p.work ? __shfl_sync(1u, atomicAdd(p.work, 1), 0) : fixed_share(n);
  }
  __device__ __forceinline__ static FwdWorkItem at(const AttentionFwdParams& p, int item) {
    const AttnShape& sh = p.shape;
    const int bh_count = sh.batch * sh.heads_q, band = max(p.q_band, 1);
    const int first = item / (bh_count * band) * band;   // the band's first q tile from the last
    const int width = min(band, p.mask.q_tiles - first);  // the last band may be narrower
    const int in_band = item - first * bh_count, bh = in_band / width;
    FwdWorkItem w;
    w.b = bh / sh.heads_q;
    w.h = bh % sh.heads_q;
    w.hk = w.h / (sh.heads_q / sh.heads_kv);
    w.qt = p.mask.q_tiles - 1 - (first + in_band % width);
    w.q0 = w.qt * kAttnSm90BlockQ;
    return w;
  }
};

// Where a step's stage lives and which pass over the ring it is.
struct RingSlot {
  int stage = 0;
  unsigned parity = 0;

  template <int kStages>
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) stage = 0, parity ^= 1;
  }
};

// The producer thread, for each work item it takes (FwdWorkItem::take): the Q tile once the
// consumers are done with the previous item's (q_empty), with whether the item has kv steps, and
// with the counter the index of the item after it for the consumers (so they find their next
// item's hook parts while its Q loads; with fixed shares they work their items out themselves),
// then K and V of every step into the ring, which runs on across items, each with its step's
// record (published by the arrive on full[s], read once the consumers' wait on it returns). The
// last index it hands on is past the end. With the counter, the CTA's last act is counting itself
// done (p.work[1]); the last CTA to do so resets both counters for the next launch (every CTA
// took its last index before).
template <int kHeadDim>
__device__ __forceinline__ void attn_sm90_produce(const AttentionFwdParams& p,
                                                  const AttnFwdTmaMaps& maps, unsigned base,
                                                  unsigned char* smem) {
  using L = AttnFwdSm90Layout<kHeadDim>;
  tma_prefetch_descriptor(&maps.q);
  if (p.shape.seq_kv > 0) {  // without keys K and V may have no map
    tma_prefetch_descriptor(&maps.k);
    tma_prefetch_descriptor(&maps.v);
  }
  RingSlot slot;
  const int items = FwdWorkItem::count(p);
  volatile int* item_slot = reinterpret_cast<volatile int*>(smem + L::kItems);
  volatile int* has_steps = reinterpret_cast<volatile int*>(smem + L::kItemHasSteps);
  volatile int* records = reinterpret_cast<volatile int*>(smem + L::kStepRecords);
  auto hand_on = [&](int n, int item) {  // fixed shares: the consumers work out their own
    if (!p.work) return;
    item_slot[n & 1] = item;
    mbar_arrive(L::item_full(base, n));
  };
  int item = FwdWorkItem::take(p, 0);
  hand_on(0, item);
  for (int n = 0; item < items; ++n) {
    const FwdWorkItem w = FwdWorkItem::at(p, item);
    KvStepCursor steps;
    steps.begin(p.mask, w.b, w.h, w.qt);
    const int next = FwdWorkItem::take(p, n + 1);  // under the wait for q_empty
    if (n > 0) mbar_wait(L::q_empty(base), (n - 1) & 1);
    *has_steps = steps.valid();
    mbar_arrive_expect_tx(L::q_full(base), L::kTileBytes);
#pragma unroll
    for (int cb = 0; cb < L::kColBlocks; ++cb)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        tma_load_4d(base + L::kQ + cb * L::kColBlockBytes + half * L::kBoxBytes, &maps.q, 64 * cb,
                    w.q0 + 64 * half, w.h, w.b, L::q_full(base));
    hand_on(n + 1, next);
    for (; steps.valid(); steps.advance()) {
      const KvStep st = steps.step;
      const unsigned full = L::full(base, slot.stage);
      mbar_wait(L::empty(base, slot.stage), slot.parity ^ 1);
      records[slot.stage] = st.record();
      mbar_arrive_expect_tx(full, 2 * st.tiles * L::kColBlocks * L::kBoxBytes);
      for (int t = 0; t < st.tiles; ++t)
#pragma unroll
        for (int cb = 0; cb < L::kColBlocks; ++cb) {
          const unsigned at = cb * L::kColBlockBytes + t * L::kBoxBytes;
          const int row = (st.tile + t) * kAttnBlockKV;
          tma_load_4d(L::k_tile(base, slot.stage) + at, &maps.k, 64 * cb, row, w.hk, w.b, full);
          tma_load_4d(L::v_tile(base, slot.stage) + at, &maps.v, 64 * cb, row, w.hk, w.b, full);
        }
      slot.advance<L::kStages>();
    }
    item = next;
  }
  if (!p.work) return;
  __threadfence();
  if (atomicAdd(p.work + 1, 1) == static_cast<int>(gridDim.x) - 1) {
    atomicExch(p.work, 0);
    atomicExch(p.work + 1, 0);
  }
}

}  // namespace tjk
