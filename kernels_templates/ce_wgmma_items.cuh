// The persistent tile loop of the loss products on sm_90a (linear_ce_products.cuh: dE and dC):
// one CTA per SM takes a sequence of output tiles through the ring of ce_wgmma.cuh's
// warp-specialised loops (the same mbarrier protocol), each stage tagged with its tile. Compiled
// for sm_90a only, as ce_wgmma.cuh. The protocol's model: tests/models/ce_item_ring.py.
#pragma once

#include "ce_wgmma.cuh"

namespace tilejit_ce {

// A persistent warp-specialised CTA takes a sequence of items (output tiles, each with its own
// number of K steps) through one ring. The loading warpgroup's first warp walks the CTA's items
// and pushes their steps (ItemRingLoader), tagging each stage in shared memory with the step's
// item (ring_tags: the tag is written before the full barrier's arrival, which releases it to the
// computing threads' wait). The computing warpgroups follow the tags (gemm_loop_sm90_ws_items):
// after an item's last step they run its epilogue while the loader already fills the ring with
// the next item's steps, so an item pays neither a CTA start, a ring fill nor a tail of its own.
// A tag: the item (bits 0..27), kTagSkipGroup << g where warpgroup g multiplies nothing in this
// step (its rows of A are zero there), kTagLast on the item's last step; kTagEnd: no more items.
constexpr int kTagItemMask = (1 << 28) - 1, kTagSkipGroup = 1 << 28, kTagLast = 1 << 30;
constexpr int kTagEnd = -1;

// The loading side of gemm_loop_sm90_ws_items, called by every lane of the loading warpgroup's
// first warp alike (warp-uniform), its ring operations done by lane 0: push(tag, load_tma) waits
// for the next stage to be free, tags it and calls load_tma(stage, full), which arrives on the
// stage's full barrier with the bytes it expects (as a warp-specialised loop's load_tma, or
// without bytes where the stage carries no operands); finish() hands the computing threads the
// end tag. The other lanes run on without waiting (what they share with lane 0 in shared memory
// needs a __syncwarp).
template <class Cta>
struct ItemRingLoader {
  u32 base, full0, empty0, tags;  // shared addresses: the ring, its barriers, its tags
  int s = 0, pass = 0;
  __device__ __forceinline__ void next_free_stage() const {
    if (pass > 0) tjk::mbar_wait(empty0 + 8 * s, (pass - 1) & 1);
  }
  template <class LoadTma>
  __device__ __forceinline__ void push(int tag, LoadTma load_tma) {
    if ((threadIdx.x & 31) == 0) {
      next_free_stage();
      tjk::st_shared_u32(tags + 4 * s, tag);
      load_tma(base + s * (Cta::kStageElems * 2), full0 + 8 * s);
    }
    if (++s == Cta::kStages) s = 0, ++pass;
  }
  __device__ __forceinline__ void finish() const {
    if ((threadIdx.x & 31) != 0) return;
    next_free_stage();
    tjk::st_shared_u32(tags + 4 * s, kTagEnd);
    tjk::mbar_arrive(full0 + 8 * s);
  }
};

// The persistent loop (launched with Cta's 384 threads; every operand by TMA):
// load_items(ring) runs on the loading warpgroup's first warp and pushes every step of the CTA's
// items in order (ItemRingLoader::push; an item has at least one step); on the computing
// threads item_begin(item) runs once the item's first products are issued (loads the epilogue
// needs can start there), item_done(item, acc) once its last are done (the accumulators hold the
// item's products; it may overwrite them). A warpgroup that a step's tag skips waits for the
// stage and releases it; one that skips every step of an item gets zero accumulators. Returns as
// gemm_loop_sm90_ws does: false on the loading threads (done), true on the computing ones once
// the end tag came. The ring's barrier protocol is gemm_loop_sm90_ws's with tma_only.
template <class Cta, bool kF16, bool kAKMajor, bool kBKMajor, class LoadItems, class ItemBegin,
          class ItemDone>
__device__ __forceinline__ bool gemm_loop_sm90_ws_items(u16* smem, LoadItems load_items,
                                                        ItemBegin item_begin, ItemDone item_done,
                                                        typename Cta::Acc& acc) {
  static_assert(Cta::kWarpSpecialized, "a CeWsCta");
  constexpr int S = Cta::kStages;
  __shared__ __align__(8) unsigned long long ring_bars[2 * S];  // full[S], then empty[S]
  __shared__ int ring_tags[S];
  const u32 smem_base = smem_addr(smem);
  if (smem_base & 1023) __trap();  // the swizzle the copies write is not the one wgmma reads
  const u32 full0 = smem_addr(&ring_bars[0]), empty0 = smem_addr(&ring_bars[S]);
  const u32 tags = smem_addr(&ring_tags[0]);
  ws_ring_init<Cta>(full0, empty0, /*tma_only=*/true);
  if (threadIdx.x >= Cta::kComputeThreads) {
    tjk::setmaxnreg_dec<56>();
    if (Cta::load_thread() < 32) {
      ItemRingLoader<Cta> ring{smem_base, full0, empty0, tags};
      load_items(ring);
      ring.finish();
    }
    return false;
  }
  tjk::setmaxnreg_inc<224>();
  const RingRelease release{empty0, 1};
  const int skip_bit = kTagSkipGroup << tjk::warpgroup_index();
  int s = 0, pass = 0, held = -1;      // stage, pass over the ring, the stage still to be released
  bool begun = false, issued = false;  // the item's first step seen; products issued for it
  for (;;) {
    tjk::mbar_wait(full0 + 8 * s, pass & 1);
    const int tag = tjk::ld_shared_u32(tags + 4 * s);
    if (tag == kTagEnd) {  // (every item's products are done: the wait only tells ptxas so,
      tjk::wgmma_wait<0>();  // which otherwise waits for them at the top of every step)
      pin_acc(acc);
      break;
    }
    const int item = tag & kTagItemMask;
    if (tag & skip_bit) {  // nothing to multiply: the stage goes back, and the last one issued
      if (held >= 0) {     // (the loader may need it before this warpgroup issues again)
        tjk::wgmma_wait<0>();
        pin_acc(acc);
        release(held);
        held = -1;
      }
      release(s);
    } else {
      ws_issue_step<Cta, kF16, kAKMajor, kBKMajor>(acc, smem_base, release, s, held, issued,
                                                   /*tma_only=*/true);
      issued = true;
    }
    if (!begun) item_begin(item);
    begun = true;
    if (tag & kTagLast) {
      tjk::wgmma_wait<0>();
      pin_acc(acc);
      if (held >= 0) release(held);
      held = -1;
      if (!issued) zero_acc(acc);
      item_done(item, acc);
      begun = issued = false;
    }
    if (++s == S) s = 0, ++pass;
  }
  return true;
}

}  // namespace tilejit_ce
