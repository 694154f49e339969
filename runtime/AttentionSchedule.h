// How the persistent Hopper attention kernels share their work items out, on the host side: the
// band of q tiles or key blocks numbered next to each other, whether the forward takes its items
// from a counter, and the backward's grid; each with the environment override it has for
// measuring. The kernels' side: attention_fwd_sm90_ring.cuh (FwdWorkItem) and
// attention_bwd_sm90_ring.cuh (BwdSm90Item). Private to runtime/Attention.cpp and its tests.
#pragma once

#include <cstdint>

namespace tilejit::attention_schedule {

// How many q tiles of one head the forward numbers next to each other, with `heads` heads of
// `tiles` each and `ctas` CTAs running at once; TILEJIT_ATTENTION_BAND (1 to 1024, read once)
// overrides it. Always within [1, max(tiles, 1)].
int forward_band(int64_t heads, int64_t tiles, int64_t ctas);

// How many key blocks of one head the backward numbers next to each other, of `key_blocks`
// per head; TILEJIT_ATTENTION_BAND overrides it as it does the forward's. Always within
// [1, max(key_blocks, 1)].
int backward_band(int64_t key_blocks);

// Whether the Hopper forward takes its items from the counter rather than in fixed shares:
// `fixed_shares` (the mask's items never grow in the order they are numbered) decides, unless
// TILEJIT_ATTENTION_SCHEDULE (read once) says 'counter' or 'fixed'.
bool forward_uses_counter(bool fixed_shares);

// The persistent Hopper backward's grid for `items` work items on `sms` SMs: one CTA per SM, at
// most one per item; TILEJIT_ATTENTION_BWD_CTAS=N (0 to 2^20, read on every call so that a test
// can set it for its own cases; 0: no cap) caps it at N. Checks that the work-item counter, which
// each CTA takes one past the last item, stays within an int.
int64_t backward_grid(int64_t items, int64_t sms);

}  // namespace tilejit::attention_schedule
