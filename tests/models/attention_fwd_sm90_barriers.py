#!/usr/bin/env python3
"""The Hopper attention forward's named-barrier protocol, checked on a model of its consumers.

kernels_templates/attention_fwd_sm90.cuh has two consumer warpgroups (four warps each) take
turns on named barriers: kSchedBarrier + c (consumer c waits, the other arrives; 256 threads),
and kLastSBarrier (consumer 0 waits before staging the pending item's output in a K tile that
consumer 1's last S read; consumer 1 arrives). A named barrier counts arrivals: a second arrival
of one consumer before the waiter has arrived completes the barrier without the waiter, which
then waits for an arrival that never comes. Nothing but timing would rule that out unless the
protocol orders every arrival after the waiter's previous wait.

This script writes out each warp's barrier operations for a CTA's sequence of work items (each
with some number of kv steps, 0 for an item whose rows are all masked) as the kernel performs
them, with the one other ordering between the consumers that matters here (an item's Q is loaded
only after both consumers released the previous item's, q_empty -> q_full), and runs them under
random adversarial schedules (a warp may run ahead for many operations). The kernel's protocol
must never deadlock nor leave an arrival behind, and every phase of a barrier must be completed
by its waiter's four warps and the other consumer's four (for kLastSBarrier: the wait and the
arrival of the same item); the protocol it replaced (a second "consumer 0 issues first" arrival
after the pending P V's, one kLastSBarrier for every item) must be found to fail, which shows
the model can. In the kernel an item's first issue turn carries the pending item's last P V
(attn_sm90_consume); only an item without kv steps and the kernel's tail give it a turn of its
own (attn_sm90_issue_pending).

  python3 tests/models/attention_fwd_sm90_barriers.py [RUNS]
"""
import random
import sys

from adversarial import NamedBarriers, run_schedule

SCHED0, SCHED1, LAST0, LAST1 = 0, 1, 2, 3
WARPS = 8  # warps 0-3: consumer 0, 4-7: consumer 1


def warp_program(cw, items, current):
    """Barrier operations of one warp of consumer `cw` over the CTA's items."""
    sched = (SCHED0, SCHED1)
    take, give = ("sync", sched[cw], None), ("arrive", sched[cw ^ 1], None)

    def last_s(op, n):  # tagged with the item
        return (op, LAST0 + (n & 1) if current else LAST0, n)

    ops, pending, pending_n = [], False, -1
    for n, steps in enumerate(items):
        after_pending = pending
        if pending and not current:  # attn_sm90_issue_pending, before Q (the earlier kernel)
            ops += [take, give, ("sync", SCHED0, None)] if cw == 0 else [take, give]
        ops.append(("q_full", n, None))
        if cw == 1 and (not current or not after_pending):
            ops.append(("arrive", SCHED0, None))  # consumer 0 issues first
        if steps == 0:  # every row masked
            if pending and current:
                ops += [take, give]  # attn_sm90_issue_pending
            if pending and cw == 0:
                ops.append(last_s("sync", pending_n))  # attn_sm90_finish_pending
            if cw == 0:
                ops.append(("sync", SCHED0, None))
            ops.append(("q_empty", n, None))
            pending = False
            continue
        ops += [take, give]  # the first step: the pending item's last P V and the first S
        if pending and cw == 0:
            ops.append(last_s("sync", pending_n))
        for _ in range(steps - 1):
            ops += [take, give]
        ops.append(("q_empty", n, None))
        if cw == 1:
            ops.append(last_s("arrive", n))
        pending, pending_n = True, n
    if pending:  # the kernel's tail
        ops += [take, give]
        if cw == 0:
            ops += [("sync", SCHED0, None), last_s("sync", pending_n)]
    return ops


def run(items, current, rng):
    """'ok', 'deadlock', 'left over' or 'waiter missing' for one random schedule."""
    programs = [warp_program(w // 4, items, current) for w in range(WARPS)]
    waiter_of = {SCHED0: 0, SCHED1: 1, LAST0: 0, LAST1: 0}  # the consumer that waits
    barriers = NamedBarriers(waiter_of.get, "waiter missing")  # LAST*: one item per phase
    released = [0] * len(items)  # warps done with item n's Q

    def ready(w, operation):
        op, n, _ = operation
        return op != "q_full" or n == 0 or released[n - 1] == WARPS

    def perform(w, operation):
        op, x, _ = operation
        if op == "q_empty":
            released[x] += 1
        return None

    return run_schedule(programs, ready, perform, barriers, rng)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    failures = {}
    for current in (True, False):
        rng = random.Random(0x5eed)
        kinds = {}
        for _ in range(runs):
            items = [rng.choice((0, 1, 1, 2, 3)) for _ in range(rng.randint(1, 6))]
            result = run(items, current, rng)
            if result != "ok":
                kinds[result] = kinds.get(result, 0) + 1
        failures[current] = sum(kinds.values())
        print(f"{'kernel' if current else 'previous'} protocol: {failures[current]} of {runs} "
              f"schedules fail {kinds if kinds else ''}")
    if failures[True] or not failures[False]:
        sys.exit("FAILED: the kernel's protocol must never fail, the previous one must")


if __name__ == "__main__":
    main()
