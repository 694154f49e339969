#!/usr/bin/env bash
# A / B (/ C ...) of the fused linear cross-entropy through the public path:
# bench/linear_ce_gpu_bench built (CMake, LLVM off) from each given source tree and from this one,
# run one after the other on the same GPU with the same arguments, rows side by side. A tree is
# any checkout or `git archive REV | tar -x -C DIR` of the project; its column is its directory's
# name, this tree's is "head".
#   bench/ab_ce_bench.sh OUTDIR TREE... [-- linear_ce_gpu_bench arguments]
#   (default arguments: --kinds zipf --shapes gemma2_2b,llama3_8b --modes exact,state --iters 5)
#   env: AB_ROUNDS (default 2): runs of every side, in alternating order
#        AB_NCU (default 0): 1 also times every side's kernels under ncu (its fixed clocks, so
#          free of the GPU's drift; the speed-of-light section only, ~25 s a side) on one run of
#          AB_NCU_ARGS (default --kinds zipf --shapes gemma2_2b --modes exact --iters 1); a table
#          of milliseconds per kernel (name without its hash, grid) and side
set -uo pipefail
usage="usage: bench/ab_ce_bench.sh OUTDIR TREE... [-- bench arguments]"
default_args=(--kinds zipf --shapes gemma2_2b,llama3_8b --modes exact,state --iters 5)
source "$(dirname "$0")/ab_trees.sh"
build() {  # side tree
  ab_prebuilt "$1" linear_ce_gpu_bench && return
  cmake -S "$2" -B "$out/$1/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
    -DTILEJIT_BUILD_BENCH=ON >"$out/$1/configure.log" 2>&1 &&
    cmake --build "$out/$1/build" -j "$jobs" --target linear_ce_gpu_bench >"$out/$1/build.log" 2>&1
}
for i in "${!trees[@]}"; do
  mkdir -p "$out/${names[$i]}"
  build "${names[$i]}" "${trees[$i]}" &
done
wait
# Rounds in alternating order (A B C, then C B A, ...), so a drift in the GPU's state over the
# run (clocks, temperature) falls on every side alike; a side's cell is the mean over rounds.
rounds=${AB_ROUNDS:-2}
for ((round = 0; round < rounds; ++round)); do
  order=("${names[@]}")
  if ((round % 2)); then
    order=()
    for ((i = ${#names[@]} - 1; i >= 0; --i)); do order+=("${names[$i]}"); done
  fi
  for side in "${order[@]}"; do
    bin="$out/$side/build/bench/linear_ce_gpu_bench"
    if [ -x "$bin" ]; then  # a kernel cache per side: the trees' kernels differ
      TILEJIT_CACHE_DIR="$out/$side/cache" "$bin" "${args[@]}" \
        >"$out/$side/ce_bench.r$round.jsonl" 2>"$out/$side/ce_bench.r$round.err"
      echo "$side round $round: rc=$?"
    else
      echo "$side: build failed"; tail -5 "$out/$side/build.log"
    fi
  done
done
python3 - "$out" "$rounds" "${names[@]}" <<'PY'
import json, sys
out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rows(name):
    by_key = {}
    for r in range(rounds):
        try:
            lines = open(f"{out}/{name}/ce_bench.r{r}.jsonl").readlines()
        except OSError:
            continue
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:  # a round that stopped mid-line
                continue
            by_key.setdefault((row["shape"], row["data"], row["mode"]), []).append(row)
    return by_key
def mean(v):
    return sum(v) / len(v)
sides = [rows(n) for n in names]
print(f"mean over the rounds (of {rounds}) that gave the row, ± max - min; [n] where fewer")
print(f'{"fwd / fwd+bwd ms":28s} ' + " ".join(f"{n[:27]:>27s}" for n in names))
for key in sorted(set().union(*sides)):
    cells = []
    for side in sides:
        rs = side.get(key)
        if not rs:
            cells.append("missing")
        elif any("error" in r for r in rs):
            cells.append("error")
        else:
            f, fb = [r["fwd_ms"] for r in rs], [r["fwd_bwd_ms"] for r in rs]
            cells.append(f'{mean(f):6.2f}±{max(f) - min(f):3.1f} / '
                         f'{mean(fb):7.2f}±{max(fb) - min(fb):3.1f}'
                         + (f' [{len(rs)}]' if len(rs) < rounds else ''))
    print(f'{" ".join(key):28s} ' + " ".join(f"{c:>27s}" for c in cells))
# The mean over a row's steps (its median above is the steady state): where an order is rebuilt
# every k steps, this one carries the rebuilds.
print("fwd / fwd+bwd ms, mean over the steps (then over the rounds)")
for key in sorted(set().union(*sides)):
    cells = []
    for side in sides:
        rs = [r for r in side.get(key, []) if "fwd_bwd_ms_mean" in r]
        cells.append(f'{mean([r["fwd_ms_mean"] for r in rs]):6.2f} / '
                     f'{mean([r["fwd_bwd_ms_mean"] for r in rs]):7.2f}' if rs else "missing")
    print(f'{" ".join(key):28s} ' + " ".join(f"{c:>27s}" for c in cells))
PY
[ "${AB_NCU:-0}" = 1 ] || exit 0
read -ra ncu_args <<<"${AB_NCU_ARGS:---kinds zipf --shapes gemma2_2b --modes exact --iters 1}"
for side in "${names[@]}"; do
  bin="$out/$side/build/bench/linear_ce_gpu_bench"
  [ -x "$bin" ] || continue
  TILEJIT_CACHE_DIR="$out/$side/cache" timeout 150 ncu --section SpeedOfLight \
    -k regex:tj_linear_ce_ --launch-count 200 "$bin" "${ncu_args[@]}" >"$out/$side/ncu.log" 2>&1
  rc=$?
  echo "$side ncu: rc=$rc$( ((rc == 124)) && echo ' (timed out: its kernels are cut short)')"
done
python3 - "$out" "${names[@]}" <<'PY'
import re, sys
out, names = sys.argv[1], sys.argv[2:]
scale = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
         "s": 1e3, "second": 1e3}
def kernels(name):
    ms, kernel = {}, None
    try:
        lines = open(f"{out}/{name}/ncu.log")
    except OSError:
        return ms
    for line in lines:
        m = re.match(r"^  (tj_\S+) \(([^)]*)\)x", line)
        if m:
            kernel = re.sub(r"_[0-9a-f]{16}$", "", m.group(1)) + f" ({m.group(2)})"
            continue
        m = re.match(r"^\s+Duration\s+(\S+)\s+([\d.,]+)", line)
        if m and kernel:
            t = ms.setdefault(kernel, [0, 0.0])
            t[0] += 1
            t[1] += float(m.group(2).replace(",", "")) * scale.get(m.group(1), float("nan"))
            kernel = None
    return ms
sides = [kernels(n) for n in names]
print("ncu (fixed clocks): launches x, total ms")
print(f'{"kernel (grid)":52s} ' + " ".join(f"{n[:14]:>14s}" for n in names))
for k in sorted(set().union(*sides)):
    cells = [f"{s[k][0]:2d}x {s[k][1]:8.3f}" if k in s else "-" for s in sides]
    print(f"{k[:52]:52s} " + " ".join(f"{c:>14s}" for c in cells))
PY
