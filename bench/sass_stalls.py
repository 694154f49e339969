#!/usr/bin/env python3
"""Where a kernel's warps wait, from ncu's source counters.

  ncu --set full --import-source yes -k regex:KERNEL --launch-count 1 -o REP BINARY ARGS...
  ncu --import REP.ncu-rep --page source --csv --print-source sass > REP.csv
  bench/sass_stalls.py REP.csv [TOP]

Prints the warp stall samples summed per opcode (with each opcode's three largest stall reasons),
the share of each stall reason, the samples per execution count (code that runs once per CTA,
per work item or per step executes a count of its own, so this splits a kernel's time between
them), and the TOP instructions (default 30) holding the most samples, in program order with
their index in the listing, so a hot spot can be read in its context.
The samples cover every warp of the CTA (a producer's waits included).
"""
import collections
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def as_int(text):
    return int(text) if text not in ("", "-") else 0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = list(csv.reader(open(sys.argv[1])))
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    # The first line names the kernel; the second is the header.
    header = rows[1]
    column = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    code = rows[2:]
    total = sum(as_int(r[column[SAMPLES]]) for r in code) or 1
    print(rows[0][0], rows[0][1] if len(rows[0]) > 1 else "")
    print(f"{total} samples over {len(code)} instructions")

    per_opcode = collections.Counter()
    opcode_reasons = collections.defaultdict(collections.Counter)
    for r in code:
        words = r[column["Source"]].split()
        words = words[1:] if words and words[0].startswith("@") else words  # predicate
        opcode = words[0].split(".")[0] if words else "?"
        per_opcode[opcode] += as_int(r[column[SAMPLES]])
        for reason in reasons:
            opcode_reasons[opcode][reason[len("stall_"):]] += as_int(r[column[reason]])
    print("by opcode:")
    for opcode, n in per_opcode.most_common(25):
        why = ", ".join(f"{k} {v}" for k, v in opcode_reasons[opcode].most_common(3) if v)
        print(f"  {opcode:12s} {n:8d} {100 * n / total:5.1f}%  {why}")
    overall = collections.Counter()
    for c in opcode_reasons.values():
        overall.update(c)
    print("by reason: " + ", ".join(f"{k} {100 * v / total:.1f}%"
                                    for k, v in overall.most_common(10)))

    by_count = collections.defaultdict(lambda: [0, 0])  # execution count -> [samples, instructions]
    for r in code:
        executed = as_int(r[column["Instructions Executed"]])
        by_count[executed][0] += as_int(r[column[SAMPLES]])
        by_count[executed][1] += 1
    print("by execution count (samples, instructions), the 12 with the most samples:")
    for executed, (n, count) in sorted(by_count.items(), key=lambda kv: -kv[1][0])[:12]:
        print(f"  {executed:10d} {n:8d} {100 * n / total:5.1f}% {count:6d} instructions")

    print(f"the {top} instructions with the most samples, in program order:")
    hottest = sorted(range(len(code)), key=lambda i: -as_int(code[i][column[SAMPLES]]))[:top]
    for i in sorted(hottest):
        r = code[i]
        n = as_int(r[column[SAMPLES]])
        why = sorted(((as_int(r[column[x]]), x[len("stall_"):]) for x in reasons), reverse=True)[:2]
        print(f"  {i:5d} {n:7d} {100 * n / total:4.1f}%  executed {r[column['Instructions Executed']]:>9s}"
              f"  {r[column['Source']].strip()[:72]:72s} "
              + ", ".join(f"{k} {v}" for v, k in why if v))


if __name__ == "__main__":
    main()
