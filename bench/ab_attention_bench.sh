#!/usr/bin/env bash
# A / B (/ C ...) of attention through the public path (generated hooks included):
# bench/attention_gpu_bench built (CMake, LLVM off) from each given source tree and from this one,
# run in alternating order on the same GPU with the same arguments; medians over the rounds, side
# by side. A tree is any checkout or `git archive REV | tar -x -C DIR` of the project; its column
# is its directory's name, this tree's is "head".
#   bench/ab_attention_bench.sh OUTDIR TREE... [-- attention_gpu_bench arguments]
#   (default arguments: --masks causal,alibi_causal,softcap_causal --shapes 2,16,8192,128,16
#    --reps 30)
#   env: AB_ROUNDS (default 3): runs of every side, the order reversed every other round
#        AB_SPACERS (e.g. "3 29 71"): one round per value, each run with --spacer-mb VALUE, so
#          the rounds also differ in where the buffers land (the D 128 backward moves by up to
#          10% with it); every tree must know --spacer-mb (from the fifteenth session on)
set -uo pipefail
usage="usage: bench/ab_attention_bench.sh OUTDIR TREE... [-- bench arguments]"
default_args=(--masks causal,alibi_causal,softcap_causal --shapes 2,16,8192,128,16 --reps 30)
source "$(dirname "$0")/ab_trees.sh"
for i in "${!trees[@]}"; do
  ab_prebuilt "${names[$i]}" attention_gpu_bench && continue
  ( cmake -S "${trees[$i]}" -B "$out/${names[$i]}/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTILEJIT_WITH_LLVM=OFF -DTILEJIT_BUILD_BENCH=ON >"$out/${names[$i]}.configure.log" 2>&1 &&
    cmake --build "$out/${names[$i]}/build" -j "$jobs" --target attention_gpu_bench \
      >"$out/${names[$i]}.build.log" 2>&1
    echo "${names[$i]} build: rc=$?" ) &
done
wait
spacers=(${AB_SPACERS:-})
rounds=${AB_ROUNDS:-3}
[ ${#spacers[@]} -gt 0 ] && rounds=${#spacers[@]}
for r in $(seq 1 "$rounds"); do
  placement=()
  [ ${#spacers[@]} -gt 0 ] && placement=(--spacer-mb "${spacers[$((r - 1))]}")
  order=("${!names[@]}")
  [ $((r % 2)) -eq 0 ] && order=($(printf '%s\n' "${order[@]}" | sort -rn))
  for i in "${order[@]}"; do
    n=${names[$i]}
    # each side its own kernel cache: the first round pays the compiles, all rounds time warm
    TILEJIT_CACHE_DIR="$out/$n/cache" timeout 300 "$out/$n/build/bench/attention_gpu_bench" \
      "${args[@]}" "${placement[@]}" >"$out/$n.round$r.jsonl" 2>"$out/$n.round$r.err"
    echo "$n round $r: rc=$?"
    # this run's figures at once, so that a call cut short still shows the rounds it finished
    python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "fwd_tflops" in r:
        print("  %-20s S %6d D %3d  fwd %6.1f bwd %6.1f" % (r["mask"], r["S"], r["D"], r["fwd_tflops"], r["bwd_tflops"]))
' "$out/$n.round$r.jsonl" 2>/dev/null
  done
done
python3 - "$out" "${names[@]}" <<'PY'
import collections, glob, json, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
rows = collections.defaultdict(list)
for n in names:
    for f in sorted(glob.glob(f"{out}/{n}.round*.jsonl")):
        for line in open(f):
            r = json.loads(line)
            if "fwd_tflops" in r:
                rows[(r["mask"], r["S"], r["D"], r["H"], r["Hkv"], n)].append(
                    (r["fwd_tflops"], r["bwd_tflops"]))
print("median TFLOP/s fwd / bwd over the rounds (each round's values in brackets)")
print(f"{'mask, S, D, H/Hkv':34s}" + "".join(f"{n:>30s}" for n in names))
for key in sorted({k[:5] for k in rows}):
    line = f"{key[0]:18s} {key[1]:6d} {key[2]:3d} {key[3]:2d}/{key[4]:<2d}"
    for n in names:
        v = rows.get(key + (n,), [])
        if not v:
            line += f"{'-':>30s}"
            continue
        f, b = (statistics.median(x) for x in zip(*v))
        line += f"{f:8.0f} / {b:4.0f} [{'/'.join(f'{x:.0f}' for x, _ in v)}]".rjust(30)
    print(line)
PY
