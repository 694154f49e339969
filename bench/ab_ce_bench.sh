#!/usr/bin/env bash
# A / B (/ C ...) of the fused linear cross-entropy through the public path:
# bench/linear_ce_gpu_bench built (CMake, LLVM off) from each given source tree and from this one,
# run one after the other on the same GPU with the same arguments, rows side by side. A tree is
# any checkout or `git archive REV | tar -x -C DIR` of the project; its column is its directory's
# name, this tree's is "head".
#   bench/ab_ce_bench.sh OUTDIR TREE... [-- linear_ce_gpu_bench arguments]
#   (default arguments: --kinds zipf --shapes gemma2_2b,llama3_8b --modes exact,state --iters 5)
set -uo pipefail
usage="usage: bench/ab_ce_bench.sh OUTDIR TREE... [-- bench arguments]"
out=${1:?$usage}
shift
here="$(cd "$(dirname "$0")/.." && pwd)"
names=() trees=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  trees+=("$(cd "$1" && pwd)") || { echo "$usage"; exit 2; }
  names+=("$(basename "$1")")
  shift
done
[ ${#trees[@]} -gt 0 ] || { echo "$usage"; exit 2; }
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--kinds zipf --shapes gemma2_2b,llama3_8b --modes exact,state --iters 5)
names+=(head) trees+=("$here")
mkdir -p "$out"
sides=${#trees[@]}
jobs=$(( $(nproc) / sides > 0 ? $(nproc) / sides : 1 ))
build() {  # side tree
  cmake -S "$2" -B "$out/$1/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
    -DTILEJIT_BUILD_BENCH=ON >"$out/$1/configure.log" 2>&1 &&
    cmake --build "$out/$1/build" -j "$jobs" --target linear_ce_gpu_bench >"$out/$1/build.log" 2>&1
}
for i in "${!trees[@]}"; do
  mkdir -p "$out/${names[$i]}"
  build "${names[$i]}" "${trees[$i]}" &
done
wait
for side in "${names[@]}"; do
  bin="$out/$side/build/bench/linear_ce_gpu_bench"
  if [ -x "$bin" ]; then  # a fresh kernel cache per side: the trees' kernels differ
    TILEJIT_CACHE_DIR="$out/$side/cache" "$bin" "${args[@]}" >"$out/$side/ce_bench.jsonl" \
      2>"$out/$side/ce_bench.err"
    echo "$side: rc=$?"
  else
    echo "$side: build failed"; tail -5 "$out/$side/build.log"
  fi
done
python3 - "$out" "${names[@]}" <<'PY'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
def rows(path):
    try:
        return {(r["shape"], r["data"], r["mode"]): r for r in map(json.loads, open(path))}
    except OSError:
        return {}
sides = [rows(f"{out}/{n}/ce_bench.jsonl") for n in names]
print(f'{"fwd / fwd+bwd ms":28s} ' + " ".join(f"{n[:17]:>17s}" for n in names))
for key in sorted(set().union(*sides)):
    cells = []
    for side in sides:
        r = side.get(key)
        cells.append("missing" if r is None else "error" if "error" in r else
                     f'{r["fwd_ms"]:6.2f} / {r["fwd_bwd_ms"]:7.2f}')
    print(f'{" ".join(key):28s} ' + " ".join(f"{c:>17s}" for c in cells))
PY
