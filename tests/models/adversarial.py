"""The random adversarial scheduler of the barrier models (tests/models/*_barriers.py)."""


def run_schedule(programs, ready, perform, barriers, rng):
    """Runs each agent's list of operations (op, x, tag) under one random schedule.

    An agent that can do its next operation (not blocked in a bar.sync, and ready(agent, op)) is
    picked at random and runs a burst of 1 to 30 operations for as long as it can, so one warp may
    run far ahead of the others. Operations 'sync' and 'arrive' go to `barriers` (NamedBarriers,
    x the barrier); perform(agent, op) applies any other and returns a failure (a string) or
    None. Returns the first failure, 'deadlock' when operations are left that no agent can do,
    'left over' when every agent is done but a barrier holds arrivals, else 'ok'.
    """
    pc = [0] * len(programs)

    def can_move(a):
        if pc[a] == len(programs[a]) or a in barriers.blocked:
            return False
        return ready(a, programs[a][pc[a]])

    while True:
        runnable = [a for a in range(len(programs)) if can_move(a)]
        if not runnable:
            if any(pc[a] < len(programs[a]) for a in range(len(programs))):
                return "deadlock"
            return "left over" if barriers.left_over() else "ok"
        a = rng.choice(runnable)
        for _ in range(rng.choice((1, 1, 1, 5, 30))):
            if not can_move(a):
                break
            op = programs[a][pc[a]]
            pc[a] += 1
            if op[0] in ("sync", "arrive"):
                failure = barriers.arrive(a, *op)
            else:
                failure = perform(a, op)
            if failure:
                return failure


class NamedBarriers:
    """Named barriers of 256 threads between two consumer warpgroups (warps 0-3 and 4-7), as
    bar.sync / bar.arrive count them: every 32-thread arrival counts, whoever makes it, and the
    256th completes the phase. A phase is right only when the waiting consumer's four warps
    synced and the other's four arrived, all with the same tag (item, step).
    """

    THREADS = 256

    def __init__(self, waiter_of, failure):
        self.waiter_of = waiter_of  # barrier -> the consumer (0 or 1) that syncs on it
        self.failure = failure  # what a wrong phase is reported as
        self.count, self.phase, self.waiters = {}, {}, {}
        self.blocked = set()  # warps waiting in a bar.sync

    def arrive(self, warp, op, barrier, tag):
        """One warp's 'sync' or 'arrive'; the failure once a phase completes wrongly, or None."""
        self.count[barrier] = self.count.get(barrier, 0) + 32
        self.phase.setdefault(barrier, []).append((warp // 4, op, tag))
        if op == "sync":
            self.blocked.add(warp)
            self.waiters.setdefault(barrier, []).append(warp)
        if self.count[barrier] < self.THREADS:
            return None
        waiter = self.waiter_of(barrier)
        roles = sorted((c == waiter, o) for c, o, _ in self.phase[barrier])
        if roles != [(False, "arrive")] * 4 + [(True, "sync")] * 4:
            return self.failure
        if len({t for _, _, t in self.phase[barrier]}) != 1:
            return self.failure  # two items' or two steps' arrivals in one phase
        for v in self.waiters.pop(barrier, []):
            self.blocked.discard(v)
        self.phase[barrier].clear()
        self.count[barrier] = 0
        return None

    def left_over(self):
        return any(self.count.values())
