#!/usr/bin/env python3
"""The persistent loss products' ring of tagged stages, checked on a model of its warps.

kernels_templates/ce_wgmma_items.cuh's gemm_loop_sm90_ws_items runs a persistent CTA's output
tiles ("items") through one ring of S stages: the loading warp (ItemRingLoader) waits for a stage
to be empty (its mbarrier empty[s], one arrival per computing warpgroup's threads), writes the
stage's tag (item, which warpgroups skip the step, last step of the item) and arrives on full[s]
(one arrival); each of the two computing warpgroups waits for full[s], reads the tag, and either
skips the step (releasing the stage it still held from its last products, then this one) or
issues its products on it and releases the stage before (once those products are done); after an
item's last step it releases what it holds and runs the item's epilogue. An mbarrier's wait
takes a phase parity, so a warp that arrives twice in one phase, or a stage refilled while a
warpgroup's products still read it, would go unnoticed by timing alone.

This script writes out each agent's operations for a CTA's items (a random number of steps each,
random skips per warpgroup, on the first chunk items without steps that both warpgroups skip) and
runs them under random adversarial schedules: every phase of a barrier must be completed by the
agents it expects (full: the loader once; empty: each warpgroup once), a warpgroup must read
each stage's tag as the loader wrote it for that pass, no stage may be refilled while a
warpgroup's products hold it, and the run must neither deadlock nor leave an arrival behind. Two
broken variants must be found to fail, which shows the model can: a skipped step that does not
first release the stage held from the last products, and an item's end that releases that stage
twice.

  python3 tests/models/ce_item_ring.py [RUNS]
"""
import random
import sys

from adversarial import run_schedule

STAGES = 4
LOADER, GROUPS = 0, (1, 2)  # agents: the loading warp, computing warpgroups 0 and 1
END = "end"


def pushed_stages(items):
    """The loader's stages in order: (item, skips (bit g: warpgroup g skips), last) or END."""
    out = []
    for n, steps in enumerate(items):
        for k, skips in enumerate(steps):
            out.append((n, skips, k + 1 == len(steps)))
    return out + [END]


def loader_program(tags):
    ops = []
    for j, tag in enumerate(tags):
        s, rnd = j % STAGES, j // STAGES
        if rnd > 0:
            ops.append(("wait", ("empty", s), (rnd - 1) & 1))
        ops.append(("fill", s, j))
        ops.append(("marrive", ("full", s), None))
    return ops


def group_program(g, tags, variant):
    ops, held = [], -1
    for j, tag in enumerate(tags):
        s, rnd = j % STAGES, j // STAGES
        ops.append(("wait", ("full", s), rnd & 1))
        ops.append(("read", s, j))
        if tag == END:
            break
        _, skips, last = tag
        if skips >> g & 1:
            if held >= 0 and variant != "skip keeps held":
                ops += [("unhold", held, None), ("marrive", ("empty", held), None)]
                held = -1
            ops.append(("marrive", ("empty", s), None))
        else:
            ops.append(("hold", s, None))  # the products read the stage until released
            if held >= 0:  # the step before's products are done
                ops += [("unhold", held, None), ("marrive", ("empty", held), None)]
            held = s
        if last:
            if held >= 0:
                ops += [("unhold", held, None), ("marrive", ("empty", held), None)]
                if variant == "double release":
                    ops.append(("marrive", ("empty", held), None))
            held = -1
    return ops


class Mbarriers:
    """mbarriers: a phase completes once its expected arrivals came (full: the loader's one;
    empty: one of each warpgroup); wait(parity) passes once the phase of that parity is done."""

    def __init__(self):
        self.done = {}  # barrier -> completed phases
        self.arrivals = {}  # barrier -> arrivals of the phase in progress

    def expected(self, bar):
        return [LOADER] if bar[0] == "full" else list(GROUPS)

    def can_pass(self, bar, parity):
        return (self.done.get(bar, 0) & 1) != parity

    def arrive(self, agent, bar):
        phase = self.arrivals.setdefault(bar, [])
        phase.append(agent)
        want = self.expected(bar)
        if len(phase) < len(want):
            return None
        if sorted(phase) != want:
            return "wrong phase"
        phase.clear()
        self.done[bar] = self.done.get(bar, 0) + 1
        return None

    def left_over(self):
        return any(self.arrivals.values())


def run(items, variant, rng):
    tags = pushed_stages(items)
    programs = [loader_program(tags)] + [group_program(g, tags, variant) for g in (0, 1)]
    bars = Mbarriers()
    content = [None] * STAGES
    holders = [set() for _ in range(STAGES)]

    class NoNamedBarriers:  # run_schedule's named barriers: none here
        blocked = set()

        def left_over(self):
            return bars.left_over()

    def ready(agent, op):
        return op[0] != "wait" or bars.can_pass(op[1], op[2])

    def perform(agent, op):
        kind, x, y = op
        if kind == "wait":
            return None
        if kind == "marrive":
            return bars.arrive(agent, x)
        if kind == "fill":
            if holders[x]:
                return "refilled while read"
            content[x] = y
            return None
        if kind == "read":
            return None if content[x] == y else "stale tag"
        if kind == "hold":
            holders[x].add(agent)
        elif kind == "unhold":
            holders[x].discard(agent)
        return None

    return run_schedule(programs, ready, perform, NoNamedBarriers(), rng)


def random_items(rng):
    items = []
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.15:
            items.append([3])  # no products (dE's first chunk): both warpgroups skip
            continue
        steps = rng.randint(1, 12)
        # runs of skips per warpgroup (a half of G that is zero over many tiles)
        skip_odds = rng.choice((0.0, 0.3, 0.8))
        items.append([(rng.random() < skip_odds) | (rng.random() < skip_odds) << 1
                      for _ in range(steps)])
    return items


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    rng = random.Random(20261207)
    for i in range(runs):
        items = random_items(rng)
        result = run(items, "kernel", rng)
        if result != "ok":
            print(f"run {i}: {result} for items {items}")
            return 1
    for variant in ("skip keeps held", "double release"):
        found = None
        for i in range(runs):
            items = random_items(rng)
            result = run(items, variant, rng)
            if result != "ok":
                found = result
                break
        if not found:
            print(f"the broken variant '{variant}' was not found to fail")
            return 1
        print(f"broken variant '{variant}': {found} (as it should)")
    print(f"ok: {runs} random schedules of the kernel's protocol")
    return 0


if __name__ == "__main__":
    sys.exit(main())
