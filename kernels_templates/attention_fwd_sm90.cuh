// Block-sparse attention forward for Hopper (sm_90a): wgmma + TMA, warp-specialised, in the
// manner of FlashAttention-3. Everything but the tile loop is the portable path's
// (attention_fwd.cuh): the launch parameters, the block mask and its run traversal, the score
// pipeline over an accumulator tile (logits_from_parts: bounds, mask_mod, score_mod; full tiles
// skip the mask) and the online softmax, so both paths return the same out and lse.
//
// Persistent CTAs: a grid of at most one CTA per SM takes the work items (q tile of 128 rows,
// b * Hq), numbered longest first for triangular masks, in fixed shares, or, where the items'
// lengths do not fall in that order (documents), one at a time from a counter in global memory,
// so CTAs whose items were short take more of them (FwdWorkItem); the K/V ring runs on from one
// item to the next, the producer loads an item's Q while the consumers finish the previous
// item, and an item's epilogue runs under the next item's first product (see the note at
// attn_sm90_consume), so no CTA start-up or epilogue sits between two items' products.
// 384 threads in three warpgroups:
//   warpgroup 0, producer (40 registers): one thread loads each item's Q tile, then K and V of
//     each step into a kStages ring, with TMA; the mbarrier full[s] counts the bytes in,
//     empty[s] the 256 consumer threads done with the stage, q_empty those done with Q.
//   warpgroups 1 and 2, consumers (232 registers; 40 * 128 + 232 * 256 = 168 * 384, the
//     launch-bounds allocation): 64 query rows each. Per step,
//     S = Q K^T (wgmma, Q and K from shared memory), the score pipeline and online softmax on
//     the fp32 accumulator, P = bf16/f16(S) kept in registers as the A operand of O += P V
//     (wgmma, V from shared memory read N-major).
// A step is one kv tile of the block mask (64 columns) or two consecutive tiles of the same
// kind (128 columns, the common case). S is always computed as 64 x 128: for a one-tile step its
// upper 64 columns come from whatever the stage held and are discarded by the bounds check
// (they read as out of range, so no hook sees them); P V then uses only V's first 64 rows.
// Branches on the step (one or two tiles) only choose between whole commit groups: ptxas
// serialises every wgmma of a sequence that branches inside a group.
//
// Schedule (per consumer warpgroup): the products of step j+1's S and step j's P V are issued in
// one turn (an item's first turn: the pending item's last P V, then S), O's rescale by step j's
// alpha at the end of step j (skipped, with a warp-uniform branch, where step j's softmax left the
// warp's references where they were: OnlineSoftmax's lazy rescale); the score
// pipeline of step j+1 starts once S lands (wgmma_wait<1>). The two consumer warpgroups take
// turns to issue (named barriers kSchedBarrier + consumer index), so one's softmax overlaps the
// other's products (FlashAttention-3's ping-pong). The source also lets step j+1's softmax overlap
// its own step j's P V, but ptxas (CUDA 13.0) moves that wait up to the row max (nothing in the
// softmax touches P V's registers: a scheduling choice). Forcing the order with a branch between
// them makes it spill and serialise every product; a shared-memory store of the row sums before
// the wait holds it behind the softmax with no spills, and was level on the H200 (bench/NOTES.md,
// twenty-eighth session), so within a warpgroup only the element pass overlaps P V.
//
// Layouts and protocols relied on (PTX ISA):
//   - wgmma fragments and shared-memory matrices: see wgmma.cuh (9.7.15.5.1). S and O are
//     m64nNk16 accumulators, so the thread holding S(r, c) is the one the portable kernel's
//     apply_logits assumes for a [1][N / 8][4] tile with row0 = 16 * warp + g, col0 = 2t.
//   - Q, K, V tiles in shared memory: per 64-column block of D, 128 rows of 128 B, 1024-B
//     aligned, 16-B chunk c of row r at chunk c ^ (r & 7) -- what TMA writes with
//     CU_TENSOR_MAP_SWIZZLE_128B for a 64 x 64 box (rows 64 apart = 8192 B) and what the
//     128-byte-swizzle descriptors read. Q and K are K-major operands (SBO 1024); V is the
//     N-major B of P V (imm-trans-b = 1, LBO = 16384 between its 64-column blocks, SBO 1024).
//   - mbarriers (9.7.13.15): q_full and full[s] complete on one arrive.expect_tx plus the
//     transaction bytes of their boxes (a box partly or wholly outside the tensor is zero-filled
//     and counts in full); empty[s] and q_empty on 256 arrivals; with the counter only,
//     item_full[n & 1] on one arrival, once the producer has stored the index of the CTA's
//     item n (its arrive releases the store, the consumers' wait acquires it), the n-th time for
//     parity (n >> 1) & 1. The producer stores item n + 1's index after waiting for q_empty of
//     item n - 1, which the consumers arrive on after they have read item n - 1's: a slot is
//     rewritten only once read, and a barrier runs at most one phase ahead of its waiters.
//     Pass n over the ring waits for parity n & 1 on full[s] (consumers) and (n & 1) ^ 1 on
//     empty[s] (producer; a fresh barrier reports parity 1 complete); the CTA's item n waits for
//     parity n & 1 on q_full, and its producer for parity (n - 1) & 1 on q_empty before loading
//     item n's Q (n >= 1).
//   - named barriers (bar.sync / bar.arrive over both consumers' 256 threads): a second arrival
//     before the barrier's waiter has arrived would complete it without that waiter (and hang
//     the CTA later), so each arrival is ordered after the waiter's previous wait. In the loop a
//     consumer passes the turn right after taking its own, which needed the other's pass. An
//     item's first turn for consumer 0 is the one consumer 1 passes after the pending P V, or,
//     with nothing pending, after Q lands: consumer 0 took its last turn before it released the
//     previous item's Q, which the producer waits for before loading this one. The kernel's tail
//     takes consumer 1's pass after the last pending P V. kLastSBarrier alternates between two
//     barriers from item to item (attn_sm90_finish_pending). tests/models/
//     attention_fwd_sm90_barriers.py checks all this on a model of both consumers.
//   - wgmma.fence before each batch of products (S, O and P are written by ordinary code in
//     between); one commit group per product; the accumulators and P are touched only after a
//     wait_group that covers them (9.7.15.7).
//
// Files: the producer side (layout, kv steps, work items, ring slots, producer thread) is in
// attention_fwd_sm90_ring.cuh, the consumers' item epilogue in attention_fwd_sm90_epilogue.cuh;
// the products, the consumers and the kernel are here.
//
// Hooks: Prog::kMaskIsTrue, Prog::kScoreIsIdentity, Prog::mask_mod / score_mod, as in
// attention_fwd.cuh. Launch: attention_fwd_sm90_kernel below, or a generated entry point with
// __launch_bounds__(kAttnFwdSm90Threads, 1) calling attention_fwd_sm90_cta; dynamic shared memory
// AttnFwdSm90Layout<D>::kBytes; the block mask built with block_q = 128, block_kv = 64.
#pragma once

#include "attention_fwd_sm90_epilogue.cuh"
#include "attention_fwd_sm90_ring.cuh"

namespace tjk {

// S = Q K^T for the warpgroup's 64 rows and the stage's 128 K rows: `q_rows` is the address of
// the warpgroup's first row in Q's first column block, `k` the stage's K tile.
template <class T, int kHeadDim>
__device__ __forceinline__ void attn_sm90_qk(float (&s)[16][4], unsigned q_rows, unsigned k) {
  using L = AttnFwdSm90Layout<kHeadDim>;
  const unsigned long long a = smem_descriptor_sw128(q_rows, 16, 1024);
  const unsigned long long bd = smem_descriptor_sw128(k, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const unsigned at = (kk >> 2) * L::kColBlockBytes + (kk & 3) * 32;
    Wgmma<128>::ss<T>(s, smem_descriptor_advance(a, at), smem_descriptor_advance(bd, at), kk > 0);
  }
}

// O += P V over the step's first 16 * kSlices kv rows (8 for a two-tile step, 4 for one): P's
// k16 slice kk is p[kk] (A fragments), V's rows 16kk.. of the stage's V tile.
// `accumulate` = 0 on an item's first P V: O is overwritten, so no ordinary code clears it (ptxas
// serialises every wgmma where such code sits between a product's issue and its wait).
template <class T, int kHeadDim, int kSlices>
__device__ __forceinline__ void attn_sm90_pv(float (&o)[kHeadDim / 8][4], const unsigned (&p)[8][4],
                                             unsigned v, int accumulate) {
  using L = AttnFwdSm90Layout<kHeadDim>;
  const unsigned long long vd = smem_descriptor_sw128(v, L::kColBlockBytes, 1024);
#pragma unroll
  for (int kk = 0; kk < kSlices; ++kk)
    Wgmma<kHeadDim>::template rs<T>(o, p[kk], smem_descriptor_advance(vd, kk * 16 * 128),
                                    kk > 0 || accumulate);
}

// O's rows brought to the running max of the step whose P is added next.
template <int kDN>
__device__ __forceinline__ void attn_sm90_rescale(float (&o)[kDN][4], const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < kDN; ++n) {
    o[n][0] *= alpha[0];
    o[n][1] *= alpha[0];
    o[n][2] *= alpha[1];
    o[n][3] *= alpha[1];
  }
}

// P V of the previous step, one commit group (O already brought to that step's references).
template <class T, int kHeadDim, int kSlices>
__device__ __forceinline__ void attn_sm90_issue_pv(float (&o)[kHeadDim / 8][4],
                                                   const unsigned (&p)[8][4], unsigned v,
                                                   int accumulate) {
  wgmma_fence();
  attn_sm90_pv<T, kHeadDim, kSlices>(o, p, v, accumulate);
  wgmma_commit();
}

// P as the A fragments of P V: k16 slice kk is S's column groups 2kk and 2kk + 1.
template <class T>
__device__ __forceinline__ void attn_sm90_pack_p(unsigned (&p)[8][4], const float (&s)[16][4]) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    p[kk][0] = ElemOps<T>::pack(s[2 * kk][0], s[2 * kk][1]);
    p[kk][1] = ElemOps<T>::pack(s[2 * kk][2], s[2 * kk][3]);
    p[kk][2] = ElemOps<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    p[kk][3] = ElemOps<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// Issues the last P V of `pending` (if any) in a turn of its own, where no S follows it (an item
// without kv steps, the kernel's tail): consumer 0's, then consumer 1's. The turn consumer 1
// passes after its P V is consumer 0's next one: the wait of the item without kv steps
// (attn_sm90_consume) or the tail's wait after the last item.
template <class T, int kHeadDim>
__device__ __forceinline__ void attn_sm90_issue_pending(const FwdPendingItem& pending,
                                                        unsigned base, int cw,
                                                        float (&o)[kHeadDim / 8][4]) {
  using L = AttnFwdSm90Layout<kHeadDim>;
  if (!pending.valid) return;
  named_barrier_sync(kSchedBarrier + cw, 256);
  if (pending.tiles == 2)
    attn_sm90_issue_pv<T, kHeadDim, 8>(o, pending.pf, L::v_tile(base, pending.stage),
                                       pending.accumulate);
  else
    attn_sm90_issue_pv<T, kHeadDim, 4>(o, pending.pf, L::v_tile(base, pending.stage),
                                       pending.accumulate);
  named_barrier_arrive(kSchedBarrier + (cw ^ 1), 256);
}

// A consumer warpgroup (cw = 0 or 1) on one work item: rows q0 + 64 cw .. + 63 of its tile.
// `slot` is the ring position, carried from item to item; `nth` the item's index in this CTA.
// O and the softmax's state come in holding the previous item's, `pending`.
//
// The epilogue runs one item late, so the tensor pipe works on the next item while an item is
// normalised and stored. An item ends with its last softmax; the next call's first issue turn
// issues that item's last P V and then this item's first S, waits for both and runs the epilogue
// (attn_sm90_finish_pending) before the first softmax; the other consumer's products run under
// it. ptxas's checks on accumulators do not follow which branch a path took, so every step
// commits the same three groups and the epilogue waits for all of them (a wait for the P V alone
// made ptxas serialise every wgmma: C7514). The last P V is not issued at the end of its own item:
// a product in flight across the item loop's back edge made ptxas serialise every wgmma of the
// kernel. O is staged, for its TMA store, in the warpgroup's 64 rows of the K tile
// of the item's last stage -- not in Q, which the consumers hand back (q_empty) as soon as their
// last S has landed, so the producer loads the next item's Q under the last softmax and P V. An
// item without kv steps (every row masked) issues the pending P V in a turn of its own, runs the
// pending epilogue, then writes its own rows
// (attn_sm90_empty_rows) and hands Q back.
template <class Prog, class Args, class T, int kHeadDim>
__device__ __forceinline__ void attn_sm90_consume(const AttentionFwdParams& p, const Args& args,
                                                  const AttnFwdTmaMaps& maps,
                                                  const FwdWorkItem& w, unsigned base,
                                                  const unsigned char* smem, int cw,
                                                  RingSlot& slot, int nth,
                                                  float (&o)[kHeadDim / 8][4],
                                                  OnlineSoftmax<1>& sm, FwdPendingItem& pending) {
  using L = AttnFwdSm90Layout<kHeadDim>;
  const AttnShape& sh = p.shape;
  const int b = w.b, h = w.h, q0 = w.q0;
  const int thread = threadIdx.x & 127, warp = thread >> 5, lane = threadIdx.x & 31;
  const int row0 = q0 + 64 * cw + 16 * warp + (lane >> 2);  // rows row0 and row0 + 8
  const float scale_log2 = sh.scale * kLog2e;
  const bool q_interior = q0 + 64 * cw + 64 <= sh.seq_q;
  const unsigned q_rows = base + L::kQ + cw * 64 * 128;
  auto take_turn = [&] { named_barrier_sync(kSchedBarrier + cw, 256); };
  auto pass_turn = [&] { named_barrier_arrive(kSchedBarrier + (cw ^ 1), 256); };
  const bool after_pending = pending.valid;
  // The steps as the producer publishes them, one record per stage (KvStep::record).
  const volatile int* records = reinterpret_cast<const volatile int*>(smem + L::kStepRecords);

  float s[1][16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n)
#pragma unroll
    for (int c = 0; c < 4; ++c) s[0][n][c] = 0.f;
  unsigned(&pf)[8][4] = pending.pf;  // P of the previous step: the pending item's until S lands

  // Where score_mod keeps the multi-function pipe busy per element (a soft-cap's tanh beside the
  // softmax's ex2: two of its operations per element, at 16 per clock, about the tensor pipe's
  // time for the step's two products at D 128), a quarter of the exponentials go to the FMA
  // pipe. At D 64 that was slower (bench/NOTES.md): there the issue slots bind first.
  constexpr int kFmaExp2Tiles = ScoreUsesXu<Prog>::value && kHeadDim == 128 ? 4 : 0;

  // The hooks' parts (hook_parts.cuh): the rows' once per item; a step's columns' before its S
  // lands, so their loads (a document id per column) overlap the product -- the mask's only
  // on a partial step -- one per lane, shuffled to the element pass (compute_held_columns).
  constexpr bool kAnyMask = !Prog::kMaskIsTrue;
  using ColParts = KvParts<Prog, kAnyMask, false>;
  QParts<Prog, kAnyMask, false> rp[1][2];
  ColParts held[4];
  compute_parts(rp[0], args, b, h, row0, 8);
  // A factored score_mod's factor (hook_parts.cuh's ScoreLog2Factored), the same on every row;
  // 0 where there is none.
  float score_factor = 0.f;
  if constexpr (ScoreLog2Factored<Prog>::value && !Prog::kScoreIsIdentity)
    score_factor = HookParts<Prog>::score_log2_factor(args, rp[0][0].score, sh.scale, b, h);
  auto column_parts = [&](const KvStep& st) {
    compute_held_columns(held, args, b, h, st.tile * kAttnBlockKV, !st.full);
  };
  // The score pipeline and softmax of a step's S; alpha rescales O's rows where the returned flag
  // says the warp's references moved (OnlineSoftmax's kLazy).
  auto scores = [&](const KvStep& st, float(&alpha)[2]) {
    AttnShape step_shape = sh;
    const int kv0 = st.tile * kAttnBlockKV;
    const int step_end = kv0 + st.tiles * kAttnBlockKV;
    step_shape.seq_kv = sh.seq_kv < step_end ? sh.seq_kv : step_end;
    const int col0 = kv0 + 2 * (lane & 3);
    // tile_logits's three element passes (attention_fwd.cuh), on the parts computed above.
    const WarpHeldColumns<ColParts, false, 4, Args> values{held, args, b, h, kv0};
    const WarpHeldColumns<ColParts, true, 4, Args> all{held, args, b, h, kv0};
    // On full interior steps the softmax applies a positive factor of the logits (one FFMA per
    // element with the reference): scale_log2 to the raw products of an identity score_mod, a
    // factored score_mod's factor to its unscaled logits.
    float s_scale = 1.f;
    if (st.full && q_interior && kv0 + 2 * kAttnBlockKV <= step_shape.seq_kv) {
      bool scaled = false;  // s_scale holds a factor of the logits
      if (Prog::kScoreIsIdentity && scale_log2 > 0.f) s_scale = scale_log2, scaled = true;
      if constexpr (ScoreLog2Factored<Prog>::value)
        if (score_factor > 0.f) {
          logits_from_parts<Prog, Args, false, false, false, true>(s, args, step_shape, scale_log2,
                                                                   b, h, row0, col0, rp, values);
          s_scale = score_factor, scaled = true;
        }
      if (!scaled)  // the logits as score_log2 gives them
        logits_from_parts<Prog, Args, false, false, false>(s, args, step_shape, scale_log2, b, h,
                                                           row0, col0, rp, values);
    } else if (st.full || Prog::kMaskIsTrue)
      logits_from_parts<Prog, Args, false, true, false>(s, args, step_shape, scale_log2, b, h,
                                                        row0, col0, rp, values);
    else
      logits_from_parts<Prog, Args, true, true, false>(s, args, step_shape, scale_log2, b, h,
                                                       row0, col0, rp, all);
    return sm.template update<16, true, kFmaExp2Tiles>(s, alpha, s_scale);
  };

  mbar_wait(L::q_full(base), nth & 1);
  // Consumer 0 issues first: the turn consumer 1 passed after its last issue for the pending
  // item, else this one.
  if (cw == 1 && !after_pending) pass_turn();
  if (!*reinterpret_cast<const volatile int*>(smem + L::kItemHasSteps)) {
    attn_sm90_issue_pending<T, kHeadDim>(pending, base, cw, o);
    attn_sm90_finish_pending<T, kHeadDim, 0>(p, maps, pending, base, cw, o, sm);
    sm.init();
    if (cw == 0) take_turn();  // consumer 1's pass, after the pending P V or after Q
    attn_sm90_empty_rows<kHeadDim>(p, w, cw);
    mbar_arrive(L::q_empty(base));
    return;
  }
  // One loop for every step, the first included, so the hooks' element passes are inlined once.
  // The first step's turn issues the pending item's last P V before the item's first S, and its
  // epilogue runs under that S; O is never cleared (the item's first P V overwrites it).
  RingSlot prev = slot;
  KvStep cur;
  int prev_tiles = 0;  // the tiles of the step whose P V is issued next; 0 on the first step
  int accumulate = 0;  // whether that P V adds to O (not the item's first)
  bool first = true;
  do {
    mbar_wait(L::full(base, slot.stage), slot.parity);
    cur = KvStep::from_record(records + slot.stage);
    take_turn();
    // Branch around whole commit groups only: a branch inside one makes ptxas split it. Every
    // path commits three groups, S the middle one: on the first step the pending item's last
    // P V before it (an empty group where there is none) and an empty group after it, later an
    // empty group before it and the previous step's P V after it, so wgmma_wait<1> means "S
    // has landed" on every path. S has one issue site (two would have the compiler move S's
    // registers between them, which serialises every wgmma), and no ordinary code touches O
    // between the issues (ptxas cannot tell the branches on `first` apart, so O's rescale there
    // would wait for the pending P V: it runs at the end of the previous step instead).
    if (first) {
      const unsigned v = L::v_tile(base, pending.stage);
      if (!pending.valid) {
        wgmma_fence();
        wgmma_commit();
      } else if (pending.tiles == 2)
        attn_sm90_issue_pv<T, kHeadDim, 8>(o, pf, v, pending.accumulate);
      else
        attn_sm90_issue_pv<T, kHeadDim, 4>(o, pf, v, pending.accumulate);
    } else {
      wgmma_fence();
      wgmma_commit();
    }
    wgmma_fence();
    attn_sm90_qk<T, kHeadDim>(s[0], q_rows, L::k_tile(base, slot.stage));
    wgmma_commit();
    if (first) {
      wgmma_fence();
      wgmma_commit();
    } else {
      const unsigned v = L::v_tile(base, prev.stage);
      if (prev_tiles == 2)
        attn_sm90_issue_pv<T, kHeadDim, 8>(o, pf, v, accumulate);
      else
        attn_sm90_issue_pv<T, kHeadDim, 4>(o, pf, v, accumulate);
    }
    pass_turn();
    column_parts(cur);
    wgmma_wait<1>();  // S has landed (and on the first step the pending P V)
    if (first) {
      attn_sm90_finish_pending<T, kHeadDim, 0>(p, maps, pending, base, cw, o, sm);
      sm.init();
    }
    pin_registers(s[0]);
    float alpha[2];
    const bool rescale = scores(cur, alpha);
    wgmma_wait<0>();  // see the schedule note at the top: ptxas places this before the softmax
    pin_registers(o);
    pin_registers(pf);
    if (!first) mbar_arrive(L::empty(base, prev.stage));
    attn_sm90_pack_p<T>(pf, s[0]);
    if (rescale) attn_sm90_rescale(o, alpha);  // for this step's P V, issued next
    accumulate = !first;
    first = false;
    prev = slot;
    prev_tiles = cur.tiles;
    slot.advance<L::kStages>();
  } while (!cur.last);
  // Every S of the item has landed: Q goes back to the producer, consumer 0 may stage in K.
  mbar_arrive(L::q_empty(base));
  if (cw == 1) named_barrier_arrive(kLastSBarrier + (nth & 1), 256);

  pending.w = w;
  pending.stage = prev.stage;
  pending.tiles = prev_tiles;
  pending.accumulate = accumulate;
  pending.nth = nth;
  pending.valid = true;
}

template <class Prog, class Args, class T, int kHeadDim>
__device__ __forceinline__ void attention_fwd_sm90_cta(const AttentionFwdParams& p,
                                                       const Args& args,
                                                       const AttnFwdTmaMaps& maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = AttnFwdSm90Layout<kHeadDim>;
  extern __shared__ unsigned char attn_sm90_smem[];
  const unsigned raw = smem_addr(attn_sm90_smem);
  const unsigned base = (raw + 1023u) & ~1023u;
  unsigned char* smem = attn_sm90_smem + (base - raw);
  if (p.mask.block_q != kAttnSm90BlockQ || p.mask.block_kv != kAttnBlockKV) __trap();
  const int wg = warpgroup_index();

  if (threadIdx.x == 0) {
    mbar_init(L::q_full(base), 1);
    mbar_init(L::q_empty(base), 256);
    mbar_init(L::item_full(base, 0), 1);
    mbar_init(L::item_full(base, 1), 1);
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(L::full(base, s), 1);
      mbar_init(L::empty(base, s), 256);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) attn_sm90_produce<kHeadDim>(p, maps, base, smem);
    return;
  }
  setmaxnreg_inc<232>();
  RingSlot slot;
  constexpr int kDN = kHeadDim / 8;
  float o[kDN][4];
  OnlineSoftmax<1> sm;
  FwdPendingItem pending;
  const int items = FwdWorkItem::count(p);
  for (int n = 0;; ++n) {
    int item;
    if (p.work) {
      mbar_wait(L::item_full(base, n), (n >> 1) & 1);
      item = reinterpret_cast<volatile const int*>(smem + L::kItems)[n & 1];
    } else {
      item = FwdWorkItem::fixed_share(n);
    }
    if (item >= items) break;
    attn_sm90_consume<Prog, Args, T, kHeadDim>(p, args, maps, FwdWorkItem::at(p, item), base,
                                               smem, wg - 1, slot, n, o, sm, pending);
  }
  attn_sm90_issue_pending<T, kHeadDim>(pending, base, wg - 1, o);
  if (wg == 1 && pending.valid) named_barrier_sync(kSchedBarrier, 256);  // consumer 1's last pass
  attn_sm90_finish_pending<T, kHeadDim, 0>(p, maps, pending, base, wg - 1, o, sm);
#else
  __trap();  // wgmma, TMA and setmaxnreg exist on sm_90a only; the runtime launches this there
#endif
}

template <class Prog, class Args, class T, int kHeadDim>
__global__ void __launch_bounds__(kAttnFwdSm90Threads, 1)
    attention_fwd_sm90_kernel(const __grid_constant__ AttentionFwdParams p,
                              const __grid_constant__ Args args,
                              const __grid_constant__ AttnFwdTmaMaps maps) {
  attention_fwd_sm90_cta<Prog, Args, T, kHeadDim>(p, args, maps);
}

}  // namespace tjk
