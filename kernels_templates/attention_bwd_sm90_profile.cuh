// The Hopper attention backward's phase clock (attention_bwd_sm90.cuh's consumers).
#pragma once

namespace tjk {

// Diagnostics (off unless TJ_BWD_SM90_PROFILE is defined, as tests/gpu/attention_harness.cu can
// be built): the clock cycles thread 0 of each consumer spends in each phase of its steps, and
// between its items' step loops, from its first wait to its exit. They are summed in shared
// memory (free bytes of the barrier block, no L2 traffic in the loop) and added into
// tj_bwd_sm90_profile once per consumer at the end. The harness prints them per case.
enum BwdSm90Phase : int {
  kPhaseParts,       // record, hook parts, issue of dP^T (split pass)
  kPhaseWaitS,       // waiting for S^T (and dP^T without a split pass)
  kPhaseP,           // the element pass (P^T, or P^T and dS^T), dV's issue
  kPhaseWaitDp,      // split pass: waiting for dP^T
  kPhaseDs,          // split pass: dS^T
  kPhaseReadOther,   // waiting for the other consumer's dQ product of step - 2
  kPhaseStoreDs,     // dS^T to shared memory, dK's issue
  kPhaseReadyOther,  // waiting for the other consumer's dS^T of step - 1 (and the dQ buffer)
  kPhaseWaitDvDk,    // dQ's issue, waiting for dV and dK
  kPhaseFull,        // waiting for the next stage (the producer)
  kPhaseWaitDq,      // S^T's issue, waiting for dQ
  kPhaseSendDq,      // dQ block to shared memory, barrier, TMA reduction
  kPhaseTail,        // the wait for the next S^T (split pass), the loop's back edge
  kPhaseItemStart,   // an item's K and V (kv_full; the last wait: the index past the end), the
                     // stagger, its first stage and S^T
  kPhaseItemEnd,     // after an item's step loop: the last dQ blocks, kv_empty, the epilogue
  kBwdSm90Phases
};
static_assert(kBwdSm90Phases <= 16, "a consumer's sums: 64 bytes of the barrier block");
#if defined(TJ_BWD_SM90_PROFILE)
__device__ unsigned long long tj_bwd_sm90_profile[kBwdSm90Phases];
struct BwdSm90PhaseClock {
  unsigned* sums;  // this consumer's, in shared memory
  unsigned t;
  bool on;
  __device__ __forceinline__ void start(bool record, unsigned* consumer_sums) {
    on = record, sums = consumer_sums;
    if (on)
      for (int i = 0; i < kBwdSm90Phases; ++i) sums[i] = 0;
    t = clock();
  }
  __device__ __forceinline__ void lap(BwdSm90Phase phase) {
    const unsigned now = clock();
    if (on) atomicAdd(&sums[phase], now - t);  // a shared-memory add, its result unused
    t = now;
  }
  __device__ __forceinline__ void flush() {
    if (on)
      for (int i = 0; i < kBwdSm90Phases; ++i)
        atomicAdd(&tj_bwd_sm90_profile[i], static_cast<unsigned long long>(sums[i]));
  }
};
#else
struct BwdSm90PhaseClock {
  __device__ __forceinline__ void start(bool, unsigned*) {}
  __device__ __forceinline__ void lap(BwdSm90Phase) {}
  __device__ __forceinline__ void flush() {}
};
#endif

}  // namespace tjk
