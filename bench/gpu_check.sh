#!/usr/bin/env bash
# One call on a GPU host: configure, build (LLVM off), run the GPU tests and the kernel
# harnesses, optionally the peers, and print a short table last. Logs and JSON go to OUTDIR.
#   bench/gpu_check.sh OUTDIR [tests] [attention] [ce] [peers]   (default: tests attention ce)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/gpu_check.sh OUTDIR [steps...]}
shift
steps=${*:-tests attention ce}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader | tee "$out/gpu.txt"
jobs=$(nproc)

if has tests; then
  t0=$(date +%s)
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
    -DTILEJIT_BUILD_BENCH=OFF >"$out/configure.log" 2>&1 &&
    cmake --build build-gpu -j "$jobs" >"$out/build.log" 2>&1
  rc=$?
  note "build: rc=$rc ($(( $(date +%s) - t0 ))s)"
  if [ $rc -eq 0 ]; then
    ctest --test-dir build-gpu --output-on-failure -j 4 >"$out/ctest.log" 2>&1
    note "ctest: rc=$? $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
    grep -E '^\s*[0-9]+/[0-9]+ Test .*(Failed|\*\*\*)' "$out/ctest.log" | head -20 | tee -a "$summary"
    build-gpu/tools/tilejit demo >"$out/demo.log" 2>&1
    note "demo: rc=$?"; tail -15 "$out/demo.log"
  else
    tail -30 "$out/build.log"
  fi
fi

run_harness() {  # name
  local name=$1 dir="build-gpu/harness"
  mkdir -p "$dir"
  if bash "tests/gpu/build_${name}_harness.sh" "$dir" >"$out/${name}_build.log" 2>&1; then
    timeout 300 "$dir/${name}_harness" "$out" >"$out/${name}.log" 2>&1
    note "$name harness: rc=$?"
    grep -vE '^\{' "$out/${name}.log" | tail -40
    grep -E '^\{' "$out/${name}.log" >"$out/${name}.jsonl"
  else
    note "$name harness: build failed"; tail -30 "$out/${name}_build.log"
  fi
}
has attention && run_harness attention
has ce && run_harness linear_ce

if has peers && [ -d .peers ]; then
  RESULTS_DIR=$out PYTHONUNBUFFERED=1 timeout 400 python3 .peers/flex_attention_peers.py \
    >"$out/flex_peers.log" 2>&1
  note "flex peers: rc=$?"; tail -40 "$out/flex_peers.log"
fi
if has cepeers && [ -d .peers ]; then
  RESULTS_DIR=$out PYTHONUNBUFFERED=1 KINDS=zipf timeout 400 python3 .peers/torch_ce_peers.py \
    >"$out/ce_peers.log" 2>&1
  note "ce peers: rc=$?"; tail -20 "$out/ce_peers.log"
fi
echo "==== summary ===="
cat "$summary"
