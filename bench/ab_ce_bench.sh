#!/usr/bin/env bash
# A / B of the fused linear cross-entropy through the public path: bench/linear_ce_gpu_bench built
# (CMake, LLVM off) from a base source tree and from this one, run one after the other on the
# same GPU with the same arguments, rows side by side. The base tree is any checkout or
# `git archive REV | tar -x -C DIR` of the project.
#   bench/ab_ce_bench.sh BASE_TREE OUTDIR [linear_ce_gpu_bench arguments]
#   (default arguments: --kinds zipf --shapes gemma2_2b,llama3_8b --modes exact,state --iters 5)
set -uo pipefail
usage="usage: bench/ab_ce_bench.sh BASE_TREE OUTDIR [bench arguments]"
base=$(cd "${1:?$usage}" && pwd)
out=${2:?$usage}
shift 2
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--kinds zipf --shapes gemma2_2b,llama3_8b --modes exact,state --iters 5)
here="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$out"
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
build() {  # side tree
  cmake -S "$2" -B "$out/$1/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
    -DTILEJIT_BUILD_BENCH=ON >"$out/$1/configure.log" 2>&1 &&
    cmake --build "$out/$1/build" -j "$jobs" --target linear_ce_gpu_bench >"$out/$1/build.log" 2>&1
}
mkdir -p "$out/base" "$out/head"
build base "$base" &
build head "$here" &
wait
for side in base head; do
  bin="$out/$side/build/bench/linear_ce_gpu_bench"
  if [ -x "$bin" ]; then  # a fresh kernel cache per side: the two trees' kernels differ
    TILEJIT_CACHE_DIR="$out/$side/cache" "$bin" "${args[@]}" >"$out/$side/ce_bench.jsonl" \
      2>"$out/$side/ce_bench.err"
    echo "$side: rc=$?"
  else
    echo "$side: build failed"; tail -5 "$out/$side/build.log"
  fi
done
python3 - "$out/base/ce_bench.jsonl" "$out/head/ce_bench.jsonl" <<'PY'
import json, sys
def rows(path):
    try:
        return {(r["shape"], r["data"], r["mode"]): r for r in map(json.loads, open(path))}
    except OSError:
        return {}
base, head = rows(sys.argv[1]), rows(sys.argv[2])
for key in sorted(set(base) | set(head)):
    cells = []
    for side in (base, head):
        r = side.get(key)
        cells.append("missing" if r is None else "error" if "error" in r else
                     f'fwd {r["fwd_ms"]:7.2f} fwd+bwd {r["fwd_bwd_ms"]:7.2f} ms')
    print(f'{" ".join(key):32s} base {cells[0]:34s} head {cells[1]}')
PY
