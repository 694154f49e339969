#!/usr/bin/env python3
"""Where the GPU waited during each timed call of a launch trace (runtime/LaunchTrace.h).

    python3 bench/launch_gaps.py TRACE.jsonl [--min-gap-us 20] [--top 8]
    python3 bench/launch_gaps.py TRACE.jsonl --kernels
    python3 bench/launch_gaps.py TRACE.jsonl --per-call [--top 8]

--kernels: per kernel name and grid, the number of launches and their median and least
duration (the events bracket each launch, so a short kernel reads a few microseconds long).

--per-call: per call label (the marker's name without its index), each kernel's time summed
over one call and its launches per call, the mean over the label's calls but the first (which
compiles and warms up); the kernels' names without their program hash. It separates a kernel's
work from its fixed cost per launch where runs differ in launch count (e.g. the fused loss's
backward chunks at two --grad-buffer-mb budgets).

For every "LABEL i begin" / "LABEL i end" marker pair (bench/linear_ce_gpu_bench.cpp marks each
timed call): the call's GPU wall time, the time some kernel ran (the union of the kernels'
intervals), the idle rest, and the largest idle gaps with the kernels on either side.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--min-gap-us", type=float, default=20.0)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--kernels", action="store_true")
    ap.add_argument("--per-call", action="store_true")
    a = ap.parse_args()
    entries = [json.loads(line) for line in open(a.trace) if line.strip()]
    if a.kernels:
        return kernel_table(entries)
    # Each flush writes times from its own first event: a marker's times are only compared with
    # the entries of the same flush, which lie between it and the next "begin" of that flush.
    begin = None
    calls = []
    for i, e in enumerate(entries):
        if e["kind"] != "marker":
            continue
        if e["name"].endswith(" begin"):
            begin = i
        elif e["name"].endswith(" end") and begin is not None:
            calls.append((entries[begin]["name"][: -len(" begin")], begin, i))
            begin = None
    if not calls:
        print("no marked calls in", a.trace)
        return 1
    if a.per_call:
        return per_call_table(entries, calls, a.top)
    print(f"{'call':40s} {'wall ms':>8s} {'busy ms':>8s} {'idle ms':>8s} {'kernels':>7s}  largest gaps (us: before -> after)")
    for label, b, e in calls:
        t0, t1 = entries[b]["start_ms"], entries[e]["start_ms"]
        ks = sorted((k for k in entries[b + 1 : e] if k["kind"] == "kernel"), key=lambda k: k["start_ms"])
        busy, cursor, gaps, prev = 0.0, t0, [], "(call start)"
        for k in ks:
            s, f = max(k["start_ms"], cursor), max(k["end_ms"], cursor)
            if k["start_ms"] > cursor:
                gaps.append((k["start_ms"] - cursor, prev, k["name"]))
            busy += f - s
            cursor = max(cursor, k["end_ms"])
            prev = k["name"]
        if t1 > cursor:
            gaps.append((t1 - cursor, prev, "(call end)"))
        gaps = sorted((g for g in gaps if g[0] * 1e3 >= a.min_gap_us), reverse=True)[: a.top]
        short = lambda n: n.replace("tj_linear_ce_", "").split("_bf16")[0].split("_f16")[0]
        desc = ", ".join(f"{g[0] * 1e3:.0f}: {short(g[1])} -> {short(g[2])}" for g in gaps)
        print(f"{label:40s} {t1 - t0:8.2f} {busy:8.2f} {t1 - t0 - busy:8.2f} {len(ks):7d}  {desc}")
    return 0


def per_call_table(entries, calls, top):
    by_label = {}
    for full, b, e in calls:
        label = full.rsplit(" ", 1)[0] if full.rsplit(" ", 1)[-1].isdigit() else full
        by_label.setdefault(label, []).append((b, e))
    for label, spans in by_label.items():
        kept = spans[1:] if len(spans) > 1 else spans
        sums, launches, wall = {}, {}, 0.0
        for b, e in kept:
            wall += entries[e]["start_ms"] - entries[b]["start_ms"]
            for k in entries[b + 1 : e]:
                if k["kind"] != "kernel":
                    continue
                name = k["name"]
                head, _, tail = name.rpartition("_")  # a program's hash: 16 hex digits
                if head and len(tail) == 16 and all(c in "0123456789abcdef" for c in tail):
                    name = head
                sums[name] = sums.get(name, 0.0) + k["end_ms"] - k["start_ms"]
                launches[name] = launches.get(name, 0) + 1
        n = len(kept)
        total = sum(sums.values()) / n
        print(f"{label}: {n} calls, wall {wall / n:.2f} ms, kernels {total:.2f} ms")
        for name, t in sorted(sums.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {name[:60]:60s} {t / n:8.3f} ms  {launches[name] / n:6.1f} launches")
    return 0


def kernel_table(entries):
    times = {}
    for e in entries:
        if e["kind"] == "kernel":
            times.setdefault((e["name"], e.get("grid", "")), []).append(e["end_ms"] - e["start_ms"])
    print(f"{'kernel':72s} {'grid':>16s} {'n':>4s} {'median ms':>10s} {'least ms':>9s}")
    for (name, grid), ts in times.items():
        ts.sort()
        print(f"{name[:72]:72s} {grid:>16s} {len(ts):4d} {ts[len(ts) // 2]:10.4f} {ts[0]:9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
