#!/usr/bin/env bash
# One call on a GPU host: configure, build (LLVM off), run the GPU tests and the kernel
# harnesses, optionally the peers, and print a short table last. Logs and JSON go to OUTDIR.
#   bench/gpu_check.sh OUTDIR [tests] [sanitize] [soak] [bench] [attention] [ce] [peers] [cepeers]
#   env: CTEST_ARGS (e.g. "-R Gpu"), BENCH_ARGS (--quick), TILEJIT_GPU_BUILD (build dir)
#   (default: tests attention ce)
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
bdir=${TILEJIT_GPU_BUILD:-build-gpu}  # build tree, kept between calls on the GPU host

if has tests; then
  t0=$(date +%s)
  cmake -S . -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
    -DTILEJIT_BUILD_BENCH=ON >"$out/configure.log" 2>&1 &&
    cmake --build $bdir -j "$jobs" >"$out/build.log" 2>&1
  rc=$?
  note "build: rc=$rc ($(( $(date +%s) - t0 ))s)"
  if [ $rc -eq 0 ]; then
    ctest --test-dir $bdir --output-on-failure -j 8 ${CTEST_ARGS:-} >"$out/ctest.log" 2>&1
    note "ctest: rc=$? $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
    grep -E '^\s*[0-9]+/[0-9]+ Test .*(Failed|\*\*\*)' "$out/ctest.log" | head -20 | tee -a "$summary"
    $bdir/tools/tilejit demo >"$out/demo.log" 2>&1
    note "demo: rc=$?"; tail -15 "$out/demo.log"
  else
    tail -30 "$out/build.log"
  fi
fi

run_harness() {  # name
  local name=$1 dir="$bdir/harness"
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
if has sanitize && [ -x $bdir/tests/attention/attention_gpu_test ]; then
  # memcheck (and racecheck on attention) over a representative subset; the cache is warm by now
  san() {  # tool test filter
    local n="$1_$(basename $2)"
    timeout 200 compute-sanitizer --tool $1 --error-exitcode 9 $bdir/tests/$2 \
      --gtest_filter="$3" --gtest_brief=1 >"$out/$n.log" 2>&1
    note "$1 $(basename $2) [$3]: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$n.log" | tail -1)"
  }
  san memcheck attention/attention_gpu_test "AttentionGpu.EdgeShapes"
  san racecheck attention/attention_gpu_test "AttentionGpu.EdgeShapes"
  san memcheck ce/linear_ce_gpu_test "*Gaps*:*ThreeSegments*:*AllRowsIgnored*"
  san memcheck mask/tilejit_classify_gpu_tests "*IndexOnly*"
fi
if has soak && [ -x $bdir/tests/codegen/tilejit_dense_mask_gpu_tests ]; then
  fails=0
  for seed in $(seq 1 ${SOAK_SEEDS:-40}); do
    TILEJIT_TEST_SEED=$seed $bdir/tests/codegen/tilejit_dense_mask_gpu_tests --gtest_filter="*HookValues*" --gtest_brief=1 \
      >>"$out/soak.log" 2>&1 || { fails=$((fails+1)); echo "seed $seed failed" >>"$out/soak.log"; }
  done
  note "hook values soak: $fails of ${SOAK_SEEDS:-40} seeds failed"
fi

has attention && run_harness attention
has ce && run_harness linear_ce

if has bench && [ -x $bdir/bench/attention_gpu_bench ]; then
  # a fresh kernel cache, so first_call_s is the cold compile of each program's kernels
  rm -rf /tmp/tilejit-bench-cache
  TILEJIT_CACHE_DIR=/tmp/tilejit-bench-cache timeout 400 $bdir/bench/attention_gpu_bench \
    ${BENCH_ARGS:-} >"$out/attention_bench.jsonl" 2>"$out/attention_bench.err"
  note "attention bench: rc=$? $(wc -l <"$out/attention_bench.jsonl") rows"
  tail -5 "$out/attention_bench.err"
  python3 - "$out/attention_bench.jsonl" <<'PY' | tee -a "$summary"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["system"] == "tilejit":
        print(f'{r["mask"]:22s} S={r["S"]:6d} D={r["D"]} Hkv={r["Hkv"]:2d} fwd {r["fwd_tflops"]:6.1f} '
              f'bwd {r["bwd_tflops"]:6.1f} TFLOP/s  mask gpu {r["mask_build_ms"]:.2f} ms cpu '
              f'{r["mask_build_cpu_ms"]:.2f} ms  first {r["first_call_s"]:.2f} s')
    else:
        print(f'mask analysis S={r["S"]:8d}: gpu {r["mask_build_ms"]:.2f} ms cpu {r["mask_build_cpu_ms"]:.2f} ms {r["mask_bytes"]} B')
PY
fi

if has peers && [ -d .peers ]; then
  # PEER_SHAPES: "B,H,S,D[,Hkv];..." runs that subset (bench/run_peers.py); unset: the full script
  if [ -n "${PEER_SHAPES:-}" ]; then
    RESULTS_DIR=$out PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-400} python3 bench/run_peers.py \
      .peers "$PEER_SHAPES" ${PEER_FLAGS:-} >"$out/flex_peers.log" 2>&1
  else
    RESULTS_DIR=$out PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-400} python3 \
      .peers/flex_attention_peers.py >"$out/flex_peers.log" 2>&1
  fi
  note "flex peers: rc=$?"; tail -40 "$out/flex_peers.log"
fi
if has cepeers && [ -d .peers ]; then
  RESULTS_DIR=$out PYTHONUNBUFFERED=1 KINDS=zipf timeout 400 python3 .peers/torch_ce_peers.py \
    >"$out/ce_peers.log" 2>&1
  note "ce peers: rc=$?"; tail -20 "$out/ce_peers.log"
fi
echo "==== summary ===="
cat "$summary"
