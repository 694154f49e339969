// Block-sparse attention backward for Hopper (sm_90a): the dK / dV (and atomic dQ) kernel of
// attention_bwd.cuh on wgmma + TMA, warp-specialised. Everything around it is the portable
// path's: the launch parameters, the preprocess (delta) and dq_convert kernels, the
// deterministic dQ kernel, the per-element formulas (element_logit: bounds, mask_mod,
// score_mod; score_grad where P > 0; full tiles skip the mask) and the transposed block-mask
// runs, so both paths compute the same dQ, dK, dV.
//
// Work item: one key block (128 keys = two block-mask kv tiles) of one (b, hk). Persistent: a CTA
// per SM takes the items one at a time from a counter, in the order in which a grid of one CTA
// per item would start them (BwdSm90Item, attention_bwd_sm90_ring.cuh): in bands of key blocks,
// band g's key blocks g * band .. g * band + band - 1 of every (b, h) in turn (the longest first
// for triangular masks), so the items of one head that run together walk the same q tiles close
// together in time and read and add to their Q, dO and dq_accum rows in L2 rather than each in
// memory (the runtime picks the band, p.key_band, runtime/AttentionSchedule.cpp; bench/NOTES.md,
// thirtieth and thirty-third sessions). An item's K and V tiles stay in shared memory for all its
// steps; the next item's load once the consumers are done with them, under the epilogue, and the
// ring runs on across items, so the next item's first steps are loaded before its K and V. The
// item walks every q head of its GQA group and, per head, the union of its two kv tiles'
// transposed run lists (q tiles in order), each q tile in two steps of kQStep = 64 rows. 384
// threads in three warpgroups:
//   warpgroup 0, producer (24 registers): warp 0 takes each item from the counter and hands its
//     index to warp 1's lane 0 (item_full / item_empty, two slots), which loads the item's K
//     and V once kv_empty says the consumers are done with the item before's and publishes the
//     index with them (kv_full: one arrive.expect_tx and the bytes; the index past the end, with
//     a plain arrive, stops the consumers); warp 0 walks each item's runs, loads Q and dO of every
//     step into a kStages ring with TMA (lane 0) and the step's lse and delta with cp.async (all
//     lanes, zero past Sq), and writes the step's record (q head, first row, the class of each
//     64-key half) next to the ring's barriers; a record with head = -1 closes the item. full[s]
//     completes on lane 0's arrive.expect_tx, the TMA bytes and 32 cp.async arrivals; empty[s]
//     on the 256 consumer threads done with the stage.
//   warpgroups 1 and 2, consumers (240 registers; 24 * 128 + 240 * 256 = 168 * 384): 64 keys
//     each, which is exactly one block-mask kv tile, so each consumer classifies its rows of a
//     step by its own tile (full: no mask; partial: mask per element; empty: P = dS = 0). Per
//     step, rows kv and columns q (transposed, as the portable kernel's dK/dV pass):
//       S^T = K Q^T, dP^T = V dO^T      wgmma ss m64n64, two commit groups, issued at the end
//                                       of the step before (S^T under its dQ product)
//       P^T (x score_grad) and          one pass once both have landed; packed to bf16 / f16
//       dS^T = P^T sg (dP^T - delta)    A fragments
//       dV += P^T dO, dK += dS^T Q      wgmma rs
//     Atomic dQ: dS^T also goes to shared memory (two alternating buffers), and dQ = dS K (wgmma
//     ss, both operands MN-major) is computed in 64 x 64 blocks one step late: step j's in step
//     j + 1, after the consumer's own dV and dK products of step j + 1 are issued. At D = 128
//     each consumer computes its 64 d columns every step, at D = 64 the consumers take turns.
//     The consumers do not meet every step: each arrives at a barrier once its half of dS^T is
//     stored and once its dQ product of a step has landed, and the other syncs on them before
//     its dQ product of that step and before rewriting the buffer (kBwdReadyBarrier,
//     kBwdReadBarrier), so one's element pass can run under the other's products; consumer 1
//     starts after consumer 0's first dS^T store. The consumer stores its block into its own
//     fp32 buffer in shared memory (the layout of two 32-column TMA boxes) at the end of the
//     step; in the next step, after the element pass, each warp, once its lanes have fenced its
//     16 rows (__syncwarp, no barrier across the warpgroup), adds them into dq_accum with two TMA
//     reductions from its lane 0 (cp.reduce.async.bulk.tensor add.f32, done in L2), which
//     dq_convert scales afterwards. By then the stores have drained, so the proxy fence costs
//     little; fenced right after the stores it held the consumer up behind them (ncu: 8% of the
//     warps' stall samples).
//     Per-thread vector reductions (red.global.add.v4.f32) cost 1.6 of 3.8 ms on causal 8k: the
//     L2 took 8192 of them per step per CTA. Each lane 0 waits for its reductions to have read
//     the buffer (cp.async.bulk.wait_group.read) before the ready barrier its consumer passes
//     before rewriting it. Deterministic mode (kAtomicDq = false) stops after dK and dV, and
//     attention_bwd_dq_kernel computes dQ without atomics.
//   Item end: once the last dQ product has landed a consumer arrives on kv_empty (256
//   arrivals), then stores dK * scale and dV from the accumulators straight to global memory
//   (the epilogue) and goes on to the next item. Each consumer has waited on every one of the
//   other's arrivals of an item before it arrives on kv_empty, and neither starts the next item
//   before kv_full, so no arrival of one item's barriers meets another item's (tests/models/
//   attention_bwd_sm90_barriers.py checks this protocol under adversarial schedules).
// A consumer releases the stage once its dV and dK products have landed (dQ reads only K and the
// dS buffer), and waits for its dQ product under the next step's S^T. It reads the next step's
// record and (split pass) lse pairs as soon as that stage's full barrier completes, and fences
// its dS^T stores after dK's issue: loaded at the top of the step, or fenced before the issue,
// their latency behind the products' shared-memory traffic sat on the step's path. Where
// score_grad does not read score the element pass is split: P^T once S^T has landed, dV issued,
// then dS^T once dP^T has landed (dP^T is then issued at the top of its step, so that no product
// is in flight across the loop's back edge: ptxas serialises the products otherwise).
//
// Layouts and protocols relied on (PTX ISA):
//   - wgmma fragments and shared-memory matrices: see wgmma.cuh (9.7.15.5.1). S^T, dP^T, dK,
//     dV and dQ are m64nNk16 accumulators: thread (warp w, lane 4g + t) holds rows 16w + g (+ 8)
//     and columns 8n + 2t (+ 1), as the portable kernel's transposed apply_bwd assumes; P^T and
//     dS^T become A fragments as the forward's P does (k16 slice kk = column groups 2kk, 2kk + 1).
//   - Tiles in shared memory, per 64-column block, rows of 128 B, 1024-B aligned, 16-B chunk c of
//     row r at chunk c ^ (r & 7) (TMA, CU_TENSOR_MAP_SWIZZLE_128B, 64 x 64 boxes): K and V have
//     128 rows per column block (16384 B), Q and dO 64.
//       S^T: A = the consumer's 64 K (or V) rows, K-major; B = Q (or dO), K-major.
//       dV / dK: B = dO (or Q) as [q x D], N-major (imm-trans-b), LBO = one column block.
//       dQ: A = dS^T read as [q x kv], i.e. MN-major (imm-trans-a); B = a 64-column block of K as
//           [kv x d], N-major (imm-trans-b). dS^T is written with the same swizzle: 128 kv rows
//           of 64 q.
//   - dS^T written with stmatrix is read by wgmma through the async proxy, the dQ buffers by
//     the TMA reductions: each writer fences (fence.proxy.async.shared::cta) before the named
//     barrier the readers pass (or the __syncwarp its warp's issuing lane passes).
//   - dQ buffers: per 32-column box, 64 rows of 128 B, 1024-B aligned, the same 16-B chunk
//     swizzle, so each warp's 16 rows are a 1024-B aligned 16-row box; the tensor map
//     (runtime/AttentionTma.h) is 4-D over (d, s, h, b) of the packed fp32 accumulator, in
//     32 x 16 boxes, so rows past Sq fall outside it.
//   - mbarriers (9.7.13.15): kv_full on one arrive.expect_tx plus the K and V bytes, kv_empty on
//     256 arrivals, one phase per item (item n waits for parity n & 1 on kv_full, the loader for
//     (n & 1) ^ 1 on kv_empty); full[s] as above (33 arrivals + bytes); empty[s] 256 arrivals.
//     Pass n over the ring waits for parity n & 1 on full[s] and (n & 1) ^ 1 on empty[s] (a
//     fresh barrier reports parity 1 complete). item_full[i] and item_empty[i] on one arrival
//     each: the producer hands item n on in slot n & 1 once item_empty[n & 1] has completed
//     parity ((n >> 1) & 1) ^ 1, the loader reads it once item_full[n & 1] has completed
//     (n >> 1) & 1 (tests/models/attention_bwd_sm90_barriers.py checks the whole protocol).
//
// Files: the producer side (layout, step records, run cursor, producer warp) is in
// attention_bwd_sm90_ring.cuh, the element passes (P^T, dS^T with the hooks) in
// attention_bwd_sm90_elements.cuh, the consumers' outputs (dQ blocks into dq_accum, an item's dK
// and dV) in attention_bwd_sm90_epilogue.cuh, the consumers' phase clock (diagnostics, off by
// default) in attention_bwd_sm90_profile.cuh; the products, the consumers and the kernel are here.
//
// Launch: attention_bwd_sm90_kernel below, or a generated entry point with
// __launch_bounds__(kAttnBwdSm90Threads, 1) calling attention_bwd_sm90_cta, on a grid of
// min(items, SMs) CTAs with p.work (zero), p.key_band and p.items set (BwdSm90Item); dynamic
// shared memory AttnBwdSm90Layout<D>::kBytes; after attention_bwd_preprocess_kernel (delta, the
// lse in the log2 domain, and dq_accum zeroed in atomic mode); the block mask built with
// block_q = 128, block_kv = 64.
//
// ptxas (CUDA 13.0, -arch=sm_90a -O3; the harness's 28 instantiations and the generated modules
// of the example programs): 168 registers at launch (setmaxnreg: producer 24, consumers 240),
// no spills in the step loop, except prefix_lm's at D = 128 (a stack frame of 8 bytes, 16 in
// the deterministic kernel: loop-invariant values reloaded once a step; its mask's parts are the
// largest). (A dQ writer thread on the producer warpgroup, FA3's arrangement, made the producer
// spill at 24 registers; the consumers spill at 232.) Dynamic
// shared memory 232448 B at D = 128 (3 stages: all 227 KiB, alignment slack included), 167936 B
// at D = 64 (4 stages). HGMMA per step: 32 at D = 128 (24 deterministic), 24 at D = 64 (16
// deterministic).
#pragma once

#include "attention_bwd_sm90_elements.cuh"
#include "attention_bwd_sm90_epilogue.cuh"
#include "attention_bwd_sm90_profile.cuh"
#include "attention_bwd_sm90_ring.cuh"

namespace tjk {

// acc = rows x step_tile^T over D: rows are the consumer's 64 keys of the K (or V) tile, the
// step tile is Q (or dO) with kQStep rows; both K-major.
template <class T, int kHeadDim>
__device__ __forceinline__ void attn_bwd_sm90_scores(
    float (&acc)[AttnBwdSm90Layout<kHeadDim>::kQStep / 8][4], unsigned rows, unsigned step_tile) {
  using L = AttnBwdSm90Layout<kHeadDim>;
  const unsigned long long a = smem_descriptor_sw128(rows, 16, 1024);
  const unsigned long long b = smem_descriptor_sw128(step_tile, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk)
    Wgmma<L::kQStep>::template ss<T>(
        acc, smem_descriptor_advance(a, (kk >> 2) * L::kKvColBlockBytes + (kk & 3) * 32),
        smem_descriptor_advance(b, (kk >> 2) * L::kQColBlockBytes + (kk & 3) * 32), kk > 0);
}

// acc += frag x step_tile over the step's q rows: frag is P^T or dS^T as A fragments (k16 slice
// kk = q rows 16kk..), the step tile dO or Q read N-major.
template <class T, int kHeadDim>
__device__ __forceinline__ void attn_bwd_sm90_accumulate(
    float (&acc)[kHeadDim / 8][4],
    const unsigned (&frag)[AttnBwdSm90Layout<kHeadDim>::kQStep / 16][4], unsigned step_tile) {
  using L = AttnBwdSm90Layout<kHeadDim>;
  const unsigned long long b = smem_descriptor_sw128(step_tile, L::kQColBlockBytes, 1024);
#pragma unroll
  for (int kk = 0; kk < L::kQStep / 16; ++kk)
    Wgmma<kHeadDim>::template rs<T>(acc, frag[kk], smem_descriptor_advance(b, kk * 16 * 128));
}

// dQ block = dS K over the CTA's 128 keys, 64 q rows by 64 d columns: `ds` is the dS^T buffer
// (MN-major A), `k` a 64-column block of the K tile (N-major B).
template <class T>
__device__ __forceinline__ void attn_bwd_sm90_dq(float (&acc)[8][4], unsigned ds, unsigned k) {
  const unsigned long long a = smem_descriptor_sw128(ds, 16384, 1024);
  const unsigned long long b = smem_descriptor_sw128(k, 16384, 1024);
#pragma unroll
  for (int kk = 0; kk < kAttnBwdSm90BlockKV / 16; ++kk)
    Wgmma<64>::template ss<T, 1, 1>(acc, smem_descriptor_advance(a, kk * 16 * 128),
                                    smem_descriptor_advance(b, kk * 16 * 128), kk > 0);
}

template <int kN>
__device__ __forceinline__ void attn_bwd_sm90_zero(float (&a)[kN][4]) {
#pragma unroll
  for (int n = 0; n < kN; ++n)
#pragma unroll
    for (int c = 0; c < 4; ++c) a[n][c] = 0.f;
}

// A consumer warpgroup (cw = 0 or 1) on one work item, whose K and V tiles have landed: keys
// kv0 + 64 cw .. + 63 of (b, hk); `slot` is the ring's, which runs on across items.
template <class Prog, class Args, class T, int kHeadDim, bool kAtomicDq>
__device__ __forceinline__ void attn_bwd_sm90_consume(const AttentionBwdParams& p, const Args& args,
                                                      const AttnBwdTmaMaps& maps, unsigned base,
                                                      unsigned char* smem, int cw, int b, int hk,
                                                      int kv0, RingSlot& slot,
                                                      BwdSm90PhaseClock& clock_of) {
  using L = AttnBwdSm90Layout<kHeadDim>;
  constexpr int kQ = L::kQStep, kQN = kQ / 8, kQK = kQ / 16, kDN = kHeadDim / 8;
  const AttnShape& sh = p.shape;
  const int thread = threadIdx.x & 127, warp = thread >> 5, lane = threadIdx.x & 31;
  const int row0 = kv0 + 64 * cw + 16 * warp + (lane >> 2);  // keys row0 and row0 + 8
  const float scale_log2 = sh.scale * kLog2e;
  const bool kv_interior = kv0 + 64 * cw + 64 <= sh.seq_kv;
  const unsigned k_rows = base + L::kK + cw * 64 * 128, v_rows = base + L::kV + cw * 64 * 128;

  float dk[kDN][4], dv[kDN][4];
  attn_bwd_sm90_zero(dk);
  attn_bwd_sm90_zero(dv);

  const bool dq_sender = kAtomicDq && lane == 0;  // issues its warp's dQ reductions
  // Each step's S^T (and, without a split pass, its dP^T) is issued at the end of the step
  // before, under that step's dQ product; once dQ has landed, its block goes to the consumer's
  // buffer and from there to dq_accum. The ring's closing record (head -1) gets the products
  // too, into stale stage contents: their results are never read, and every wait count stays
  // the same on every path (ptxas serialises all products where it cannot tell which ones are
  // in flight).
  float s[kQN][4], dp[kQN][4];
  // Where score_grad does not read score, the element pass is split: P^T (and P * score_grad,
  // kept in S^T's registers) once S^T has landed, so dV is issued while dP^T still runs; dS^T
  // once dP^T has landed. (Where it reads score, as a soft-cap's does, ptxas serialises the
  // products of a split pass: C7514.)
  constexpr bool kSplitPass = !GradReadsScore<Prog>::value;
  auto issue_s = [&](const RingSlot& at) {
    wgmma_fence();
    attn_bwd_sm90_scores<T, kHeadDim>(s, k_rows, L::q_tile(base, at.stage));
    wgmma_commit();
  };
  auto issue_dp = [&](const RingSlot& at) {
    wgmma_fence();
    attn_bwd_sm90_scores<T, kHeadDim>(dp, v_rows, L::do_tile(base, at.stage));
    wgmma_commit();
  };
  // The dQ block of step j is computed one step late, in step j + 1, so neither consumer waits
  // for the other's element pass of the step it is on (see kBwdReadyBarrier).
  auto ready_mine = [&](int j) { named_barrier_arrive(kBwdReadyBarrier + 2 * cw + (j & 1), 256); };
  auto ready_other = [&](int j) {
    named_barrier_sync(kBwdReadyBarrier + 2 * (cw ^ 1) + (j & 1), 256);
  };
  auto read_mine = [&](int j) { named_barrier_arrive(kBwdReadBarrier + 2 * cw + (j & 1), 256); };
  auto read_other = [&](int j) {
    named_barrier_sync(kBwdReadBarrier + 2 * (cw ^ 1) + (j & 1), 256);
  };
  // The 64 x 64 blocks of dQ: at D = 128 each consumer its 64 d columns, every step; at D = 64
  // the whole block, by the consumers in turn (a branch around whole commit groups only).
  auto dq_by_me = [&](int j) { return kAtomicDq && (kHeadDim == 128 || (j & 1) == cw); };
  const int dq_col0 = kHeadDim == 128 ? 64 * cw : 0;
  auto issue_dq = [&](float(&dq)[8][4], int j) {
    wgmma_fence();
    attn_bwd_sm90_dq<T>(dq, base + L::kDs + (j & 1) * L::kDsBytes,
                        base + L::kK + (dq_col0 / 64) * L::kKvColBlockBytes);
    wgmma_commit();
  };
  // Each warp sends its own 16 rows: no barrier across the warpgroup. In the loop the block is
  // stored at the end of a step and sent in the next one, after its element pass: by then the
  // stores have drained, so the proxy fence does not hold the consumer up behind them.
  // A single pass sends the block after the fence that follows dK's issue (one fence per step for
  // dS^T and dQ), so each warp waits for its reductions to have read its rows only here, just
  // before it rewrites them, rather than right after sending them.
  constexpr bool kSendAfterDsFence = !kSplitPass;
  auto stage_dq = [&](const float(&dq)[8][4]) {
    if constexpr (kSendAfterDsFence) {
      if (dq_sender) bulk_wait_group_read<0>();
      __syncwarp();
    }
    attn_bwd_sm90_store_dq(smem + (L::dq_block(base, cw) - base), dq, warp, lane);
  };
  auto flush_dq = [&](int head, int q0) {
    fence_proxy_async_shared();  // the reduction reads the buffer through the async proxy
    __syncwarp();
    if (dq_sender) attn_bwd_sm90_send_dq<kHeadDim>(maps, base, cw, warp, b, head, q0);
  };
  // The stage's record and, for a split pass, its lse pairs (this thread's q columns 8 n + col
  // (+ 1)), read as soon as its full barrier has completed, so their latency is spent under the
  // products and the dQ block of the step before rather than at the top of the element pass.
  const int col = 2 * (lane & 3);
  auto stage_stats = [&](int stage) {
    return reinterpret_cast<const float*>(smem + L::stats(stage));
  };
  auto read_record = [&](int stage) {
    return *reinterpret_cast<const BwdSm90Step*>(smem + L::step_record(stage));
  };
  float2 lse_c[kQN] = {};  // zeroed for nvcc's front end only
  auto read_lse = [&](int stage) {
    if constexpr (kSplitPass) {
      const float* lse_s = stage_stats(stage);
#pragma unroll
      for (int n = 0; n < kQN; ++n)
        lse_c[n] = *reinterpret_cast<const float2*>(lse_s + 8 * n + col);
    }
  };
  // Consumer 1 starts once consumer 0 has stored its first dS^T: the consumers run half a step
  // apart, one's element pass under the other's products.
  if (kAtomicDq && cw == 1) named_barrier_sync(kBwdStaggerBarrier, 256);
  mbar_wait(L::full(base, slot.stage), slot.parity);
  BwdSm90Step st_next = read_record(slot.stage);
  read_lse(slot.stage);
  issue_s(slot);
  if constexpr (!kSplitPass) issue_dp(slot);
  // A split pass enters the step loop with nothing in flight, as it crosses the loop's back edge:
  // inside the item loop, ptxas serialises every product otherwise (C7514). It costs the first
  // step of each item its dP^T's issue under S^T.
  if constexpr (kSplitPass) wgmma_wait<0>();
  int step = 0, prev_head = 0, prev_q0 = 0;  // the record of step - 1
  // The dQ block stored at the end of the step before, not yet sent, and its rows.
  bool dq_staged = false;
  int staged_head = 0, staged_q0 = 0;
  clock_of.lap(kPhaseItemStart);
  for (;; ++step) {
    // The stage's full barrier was waited for before its products were issued; its record stays
    // until the stage is released below.
    const BwdSm90Step st = st_next;
    if (st.head < 0) break;
    // A split pass reads S^T while dP^T runs: ptxas allows that only where no product is in
    // flight across the loop's back edge (otherwise it serialises every product, C7514), so the
    // step before waits for its S^T, and dP^T is issued here.
    if constexpr (kSplitPass) issue_dp(slot);
    const unsigned q_tile = L::q_tile(base, slot.stage), do_tile = L::do_tile(base, slot.stage);
    const unsigned ds_buf = base + L::kDs + (step & 1) * L::kDsBytes;
    // dQ of the step before; in step 0 a product into stale buffer contents, never sent, so the
    // wait counts are the same in every step.
    const bool dq_here = dq_by_me(step - 1);
    // Declared per step: P^T and dS^T are written before their products read them, dQ's first
    // product overwrites it (scale_d = 0), so none of them is live across steps.
    unsigned pf[kQK][4], dsf[kQK][4];
    float dq[8][4];

    // No key of an empty half is attended by these rows: its P and dS must be 0. With an
    // identity score_mod no hook runs on the fast path, so an lse of +inf zeroes P there;
    // otherwise the half is treated as partial (mask_mod is false at every in-range element
    // and guards score_mod). A branch that zeroed S instead made ptxas spill the accumulators.
    const int cls = cw == 0 ? st.cls[0] : st.cls[1];  // no dynamic index: no local memory
    const bool empty = cls == kBwdEmpty;
    // The lse (log2 domain) and delta of this thread's q columns col0 + 8 n (+ 1). A split pass
    // reads them as pairs before the product they combine with has landed; a single pass where
    // it uses them (read ahead of it, they make D = 128 spill).
    const float* lse_s = stage_stats(slot.stage);
    float2 delta_c[kQN] = {};  // zeroed for nvcc's front end only
    auto read_delta = [&]() {
#pragma unroll
      for (int n = 0; n < kQN; ++n)
        delta_c[n] = *reinterpret_cast<const float2*>(lse_s + kQ + 8 * n + col);
    };
    auto lse2 = [&](int n, int c) {
      if constexpr (kSplitPass)
        return empty ? pos_inf() : (c & 1) ? lse_c[n].y : lse_c[n].x;
      else
        return empty ? pos_inf() : lse_s[8 * n + col + (c & 1)];
    };
    auto delta = [&](int n, int c) {
      if constexpr (kSplitPass)
        return (c & 1) ? delta_c[n].y : delta_c[n].x;
      else
        return lse_s[kQ + 8 * n + col + (c & 1)];
    };
    const BwdSm90Tile tile{sh, scale_log2, b, st.head, row0, st.q0 + col};
    const bool full = cls == kBwdFull || (empty && Prog::kScoreIsIdentity);
    const bool interior = kv_interior && st.q0 + kQ <= sh.seq_q;
    // The hooks' parts while S^T and dP^T are computed: the two kv rows', the q columns' one per
    // lane (the mask's only on a partial step).
    KvParts<Prog, !Prog::kMaskIsTrue, true> kp[2];
    QParts<Prog, !Prog::kMaskIsTrue, true> held[kQ / 32];
    compute_parts(kp, args, b, st.head, row0, 8);
    compute_held_columns(held, args, b, st.head, st.q0, !full);
    // P^T, then dS^T: split (see kSplitPass) or in one pass once both products have landed.
    clock_of.lap(kPhaseParts);
    if constexpr (kSplitPass) {
      wgmma_wait<1>();  // S^T has landed; dP^T may still run
    } else {
      wgmma_wait<0>();
      pin_registers(dp);
    }
    pin_registers(s);
    clock_of.lap(kPhaseWaitS);
    attn_bwd_sm90_tile_probabilities<Prog, Args, T, kSplitPass>(s, dp, pf, dsf, args, tile, full,
                                                                interior, kp, held, lse2, delta);
    wgmma_fence();
    attn_bwd_sm90_accumulate<T, kHeadDim>(dv, pf, do_tile);
    wgmma_commit();
    if (!kSendAfterDsFence && dq_staged) flush_dq(staged_head, staged_q0);
    clock_of.lap(kPhaseP);
    if constexpr (kSplitPass) {
      read_delta();
      wgmma_wait<1>();  // dP^T has landed; dV may still run
      pin_registers(dp);
      clock_of.lap(kPhaseWaitDp);
      attn_bwd_sm90_gradients<T>(s, dp, dsf, delta);
      clock_of.lap(kPhaseDs);
    }
    if (kAtomicDq) {
      // Buffer step % 2 held dS^T of step - 2: the other consumer's dQ product of it has landed.
      if (step >= 2) read_other(step - 2);
      clock_of.lap(kPhaseReadOther);
      stmatrix_rows_sw128(ds_buf, dsf, 64 * cw + 16 * warp, lane);  // dS^T
    }
    wgmma_fence();
    attn_bwd_sm90_accumulate<T, kHeadDim>(dk, dsf, q_tile);
    wgmma_commit();
    if (kAtomicDq) {
      // Fenced after dK's issue, so the product runs while the stores drain.
      fence_proxy_async_shared();
      ready_mine(step);
      if (step == 0 && cw == 0) named_barrier_arrive(kBwdStaggerBarrier, 256);
      if (kSendAfterDsFence && dq_staged) {
        __syncwarp();
        if (dq_sender) attn_bwd_sm90_send_dq<kHeadDim>(maps, base, cw, warp, b, staged_head,
                                                       staged_q0);
      }
    }
    clock_of.lap(kPhaseStoreDs);
    if (kAtomicDq && step > 0) {
      // A split pass: this consumer's dQ block of an earlier step has been read out of its
      // buffer (each warp's rows by its lane 0's reductions) before its threads pass the barrier
      // below, so the buffer is free again after it (a single pass waits in stage_dq).
      if (!kSendAfterDsFence && dq_sender) bulk_wait_group_read<0>();
      ready_other(step - 1);  // both halves of dS^T of the step before are in its buffer
    }
    clock_of.lap(kPhaseReadyOther);
    if (dq_here) issue_dq(dq, step - 1);
    // dV and dK have landed (dQ may still run): the stage is free, its Q and dO read.
    if (dq_here)
      wgmma_wait<1>();
    else
      wgmma_wait<0>();
    pin_registers(dk);
    pin_registers(dv);
    pin_registers(pf);
    pin_registers(dsf);
    mbar_arrive(L::empty(base, slot.stage));
    slot.advance<L::kStages>();
    clock_of.lap(kPhaseWaitDvDk);
    mbar_wait(L::full(base, slot.stage), slot.parity);
    st_next = read_record(slot.stage);
    read_lse(slot.stage);
    clock_of.lap(kPhaseFull);
    issue_s(slot);
    wgmma_wait<1>();  // dQ has landed (a no-op without one): only the new S^T may run
    if (dq_here) pin_registers(dq);
    clock_of.lap(kPhaseWaitDq);
    dq_staged = dq_here && step > 0;
    if (dq_staged) stage_dq(dq);
    staged_head = prev_head;
    staged_q0 = prev_q0;
    if (kAtomicDq && step > 0) read_mine(step - 1);
    clock_of.lap(kPhaseSendDq);
    if constexpr (!kSplitPass)
      issue_dp(slot);  // after dQ's registers are free: with both in flight D = 128 spills
    else
      wgmma_wait<0>();  // nothing in flight across the back edge (see the loop's top)
    prev_head = st.head;
    prev_q0 = st.q0;
    clock_of.lap(kPhaseTail);
  }
  wgmma_wait<0>();  // the closing record's products
  mbar_arrive(L::empty(base, slot.stage));  // the closing record's stage
  slot.advance<L::kStages>();
  // The block stored in the last step, then the last step's dQ block; the read barriers each
  // consumer arrived at are met.
  if (dq_staged) flush_dq(staged_head, staged_q0);
  if (kAtomicDq && step > 0) {
    if (dq_sender) bulk_wait_group_read<0>();
    ready_other(step - 1);
    if (dq_by_me(step - 1)) {
      float dq[8][4];
      issue_dq(dq, step - 1);
      wgmma_wait<0>();
      stage_dq(dq);
      flush_dq(prev_head, prev_q0);
    }
    if (step >= 2) read_other(step - 2);
  }
  if (kAtomicDq && step == 0 && cw == 0) named_barrier_arrive(kBwdStaggerBarrier, 256);
  // K and V are read no more (the last dQ product has landed): the next item's load under the
  // epilogue. This consumer has waited on every arrival of the other's for this item, so the
  // other's arrivals for the next item (after kv_full) cannot meet one of this item's.
  mbar_arrive(L::kv_empty(base));

  // Epilogue: dK * scale and dV, this thread's keys row0 and row0 + 8.
  attn_bwd_sm90_store_dk_dv<T>(p, dk, dv, b, hk, row0, lane);
  clock_of.lap(kPhaseItemEnd);
}

template <class Prog, class Args, class T, int kHeadDim, bool kAtomicDq>
__device__ __forceinline__ void attention_bwd_sm90_cta(const AttentionBwdParams& p,
                                                       const Args& args,
                                                       const AttnBwdTmaMaps& maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = AttnBwdSm90Layout<kHeadDim>;
  extern __shared__ unsigned char attn_bwd_sm90_smem[];
  const unsigned raw = smem_addr(attn_bwd_sm90_smem);
  const unsigned base = (raw + 1023u) & ~1023u;
  unsigned char* smem = attn_bwd_sm90_smem + (base - raw);
  if (p.mask.block_q != attn_block_q<8, 1>() || p.mask.block_kv != kAttnBlockKV ||
      p.key_band < 1 || p.work == nullptr)
    __trap();
  const int wg = warpgroup_index();

  if (threadIdx.x == 0) {
    mbar_init(L::kv_full(base), 1);
    mbar_init(L::kv_empty(base), 256);
    for (int i = 0; i < 2; ++i) {
      mbar_init(L::item_full(base, i), 1);
      mbar_init(L::item_empty(base, i), 1);
    }
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(L::full(base, s), 1 + 32);
      mbar_init(L::empty(base, s), 256);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (wg == 0) {
    setmaxnreg_dec<24>();
    // The warp index made warp-uniform for ptxas: branching on threadIdx.x alone, it compiled the
    // two roles as divergent paths of one warp, and the ring producer spilled at 24 registers.
    const int warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
    if (warp == 0) {
      attn_bwd_sm90_produce<kHeadDim>(p, maps, base, smem, threadIdx.x);
    } else if (warp == 1) {
      if (threadIdx.x == 32) attn_bwd_sm90_load_kv<kHeadDim>(p, maps, base);
    }
    return;
  }
  setmaxnreg_inc<240>();
  const int cw = wg - 1;
  if (kAtomicDq && threadIdx.x == 128) tma_prefetch_descriptor(&maps.dq_accum);
  // The work items as the K / V loader publishes them with their K and V tiles (kv_full), up
  // to the index past the end.
  RingSlot slot;
  BwdSm90PhaseClock clock_of;
  clock_of.start((threadIdx.x & 127) == 0,
                 reinterpret_cast<unsigned*>(smem + L::kProfile + 64 * cw));
#pragma unroll 1
  for (unsigned n = 0;; ++n) {
    mbar_wait(L::kv_full(base), n & 1);
    const int item = ld_shared_u32(base + L::kKvItem);
    if (item >= p.items) break;
    const BwdSm90Item w = BwdSm90Item::at(p, item);
    attn_bwd_sm90_consume<Prog, Args, T, kHeadDim, kAtomicDq>(p, args, maps, base, smem, cw, w.b,
                                                              w.hk, w.kv0(), slot, clock_of);
  }
  clock_of.lap(kPhaseItemStart);
  clock_of.flush();
  // The dQ buffers stay allocated until their reductions have run.
  if (kAtomicDq && (threadIdx.x & 31) == 0) bulk_wait_group<0>();
#else
  __trap();  // wgmma, TMA and setmaxnreg exist on sm_90a only; the runtime launches this there
#endif
}

template <class Prog, class Args, class T, int kHeadDim, bool kAtomicDq>
__global__ void __launch_bounds__(kAttnBwdSm90Threads, 1)
    attention_bwd_sm90_kernel(const __grid_constant__ AttentionBwdParams p,
                              const __grid_constant__ Args args,
                              const __grid_constant__ AttnBwdTmaMaps maps) {
  attention_bwd_sm90_cta<Prog, Args, T, kHeadDim, kAtomicDq>(p, args, maps);
}

}  // namespace tjk
