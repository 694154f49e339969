#!/usr/bin/env python3
"""The persistent Hopper attention backward's barrier protocol, checked on a model of its CTA.

kernels_templates/attention_bwd_sm90.cuh has two consumer warpgroups (four warps each) meet on
named barriers (256 threads: one consumer's four warps sync, the other's arrive):
kBwdReadyBarrier + 2 c + (j & 1) once consumer c's half of step j's dS^T is stored,
kBwdReadBarrier + 2 c + (j & 1) once its dQ product of step j has landed, and kBwdStaggerBarrier
(consumer 1 starts an item after consumer 0's first dS^T). A named barrier counts arrivals: a
second arrival of one consumer before the other has reached the barrier completes it without
the waiter. The step parity in the ids and, between work items, the K / V tiles' barriers
(a consumer arrives on kv_empty after every named barrier of its item; the next item starts on
kv_full, which the loader completes only after both consumers' kv_empty) must rule that out.
The ring couples the consumers too: a stage is refilled only once both released it.

The work items come from a counter: the ring producer takes each, hands its index to the K / V
loader through two slots (item_full / item_empty), then writes the item's step records and its
closing record into the ring. The loader takes the index, waits for kv_empty of the item before
and publishes the index with the K and V tiles on kv_full; the index past the end, with a plain
arrive, stops the consumers.

This script writes out each warp's operations for a CTA's sequence of work items (each with some
number of q steps, 0 for a key block no q tile visits) as attn_bwd_sm90_consume performs them,
and those of the producer and the loader, and runs them under random adversarial schedules (a
warp may run ahead for many operations). The kernel's protocol must never deadlock nor leave an
arrival behind; every phase of a named barrier must be completed by the waiter's four warps and
the other consumer's four, all for the same item and step; and the loader must read each index
the producer handed on. Three weakened protocols must be found to fail, which shows the model
can: one id per consumer for the ready barrier (no step parity), items started without kv_full
waiting for the other consumer's kv_empty, and a producer that does not wait for item_empty.

  python3 tests/models/attention_bwd_sm90_barriers.py [RUNS]
"""
import random
import sys

from adversarial import NamedBarriers, run_schedule

WARPS = 8  # warps 0-3: consumer 0, 4-7: consumer 1
STAGGER = "stagger"


def warp_program(cw, items, parity_ids):
    """Operations of one warp of consumer `cw` over the CTA's items (attn_bwd_sm90_consume)."""
    other = cw ^ 1

    def bar(kind, c, j):
        return (kind, c, j & 1 if parity_ids or kind == "read" else 0)

    def named(op, kind, c, n, j):  # tagged with the item and step
        return (op, bar(kind, c, j), (n, j))

    ops, record = [], 0  # record: the ring's record index (steps and closing records)
    for n, steps in enumerate(items):
        ops.append(("kv_full", n, None))  # with the item's index
        if cw == 1:
            ops.append(("sync", STAGGER, (n, 0)))
        ops.append(("full", record, None))
        for j in range(steps):
            if j >= 2:
                ops.append(named("sync", "read", other, n, j - 2))
            ops.append(named("arrive", "ready", cw, n, j))
            if j == 0 and cw == 0:
                ops.append(("arrive", STAGGER, (n, 0)))
            if j > 0:
                ops.append(named("sync", "ready", other, n, j - 1))
            ops += [("empty", record + j, None), ("full", record + j + 1, None)]
            if j > 0:
                ops.append(named("arrive", "read", cw, n, j - 1))
        ops.append(("empty", record + steps, None))  # the closing record's stage
        if steps > 0:
            ops.append(named("sync", "ready", other, n, steps - 1))
            if steps >= 2:
                ops.append(named("sync", "read", other, n, steps - 2))
        elif cw == 0:
            ops.append(("arrive", STAGGER, (n, 0)))
        ops.append(("kv_empty", n, None))
        record += steps + 1
    ops.append(("kv_full", len(items), None))  # the index past the end: the consumers stop
    return ops


def producer_program(items):
    """The ring producer: hands each item's index on, then fills its records (steps + closing)."""
    ops, record = [], 0
    for n, steps in enumerate(items):
        ops.append(("hand", n, None))
        for _ in range(steps + 1):
            ops.append(("fill", record, None))
            record += 1
    ops.append(("hand", len(items), None))  # the index past the end
    return ops


def loader_program(items):
    """The K / V loader: per index (the last one past the end), take it, then publish it."""
    ops = []
    for n in range(len(items) + 1):
        ops += [("take", n, None), ("load", n, None)]
    return ops


def run(items, stages, parity_ids, kv_coupled, queue_guarded, rng):
    """'ok', 'deadlock', 'left over', 'wrong phase' or 'wrong item' for one random schedule."""
    programs = [warp_program(w // 4, items, parity_ids) for w in range(WARPS)]
    programs += [producer_program(items), loader_program(items)]
    # The consumer that waits: consumer 1 on the stagger, the other one on (kind, c, parity).
    barriers = NamedBarriers(lambda x: 1 if x == STAGGER else x[1] ^ 1, "wrong phase")
    released = {}  # record -> consumer warps done with its stage
    produced = [0]  # records the producer has filled
    slots = [None, None]  # the item queue
    taken = set()  # indices the loader has taken (their slot free again)
    loaded = set()  # items whose kv_full has completed
    kv_released = [set() for _ in items]  # item -> warps arrived on kv_empty

    def ready(w, operation):
        op, x, _ = operation
        if op == "full":
            return x < produced[0]
        if op == "kv_full":
            return x in loaded
        if op == "fill":  # the producer refills a stage once both consumers released it
            return x < stages or released.get(x - stages, 0) == WARPS
        if op == "hand":  # item_empty of the slot's index before
            return x < 2 or not queue_guarded or (x - 2) in taken
        if op == "take":  # item_full
            return slots[x & 1] is not None and slots[x & 1][1] >= 0
        if op == "load":  # kv_empty of the item before
            if x == 0:
                return True
            if kv_coupled:
                return len(kv_released[x - 1]) == WARPS
            return len(kv_released[x - 1]) > 0  # weakened: the first consumer warp's arrival
        return True

    def perform(w, operation):
        op, x, _ = operation
        if op == "empty":
            released[x] = released.get(x, 0) + 1
        elif op == "kv_empty":
            kv_released[x].add(w)
        elif op == "fill":
            produced[0] = x + 1
        elif op == "hand":
            slots[x & 1] = (x, x)  # (the index written, marked full)
        elif op == "take":
            if slots[x & 1][0] != x:
                return "wrong item"  # overwritten before the loader read it
            slots[x & 1] = (slots[x & 1][0], -1)
            taken.add(x)
        elif op == "load":
            loaded.add(x)
        return None

    return run_schedule(programs, ready, perform, barriers, rng)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    variants = {"kernel": (True, True, True), "one ready id per consumer": (False, True, True),
                "items not coupled by kv_empty": (True, False, True),
                "item queue without item_empty": (True, True, False)}
    failures = {}
    for name, (parity_ids, kv_coupled, queue_guarded) in variants.items():
        rng = random.Random(0x5eed)
        kinds = {}
        for _ in range(runs):
            items = [rng.choice((0, 0, 1, 1, 2, 3, 4, 7)) for _ in range(rng.randint(0, 6))]
            result = run(items, rng.choice((3, 4)), parity_ids, kv_coupled, queue_guarded, rng)
            if result != "ok":
                kinds[result] = kinds.get(result, 0) + 1
        failures[name] = sum(kinds.values())
        print(f"{name}: {failures[name]} of {runs} schedules fail {kinds if kinds else ''}")
    if failures["kernel"] or not all(failures[n] for n in variants if n != "kernel"):
        sys.exit("FAILED: the kernel's protocol must never fail, each weakened one must")


if __name__ == "__main__":
    main()
