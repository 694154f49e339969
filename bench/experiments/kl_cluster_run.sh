#!/usr/bin/env bash
# The KL forward's thread block clusters on a GPU, in one call: build, the KL GPU tests on both
# tile loops, the sanitizers on the cluster test, then the KL row timed with clusters of 1, 2
# and 4 CTAs in interleaved rounds.
#   bench/experiments/kl_cluster_run.sh OUTDIR [bench arguments]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: kl_cluster_run.sh OUTDIR [bench arguments]}
shift
mkdir -p "$out"
b=build-gpu
t0=$(date +%s)
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
  -DTILEJIT_BUILD_BENCH=ON >"$out/configure.log" 2>&1 &&
  cmake --build $b -j "$(nproc)" --target linear_ce_gpu_test linear_ce_gpu_bench \
    >"$out/build.log" 2>&1
echo "build rc=$? ($(($(date +%s) - t0))s)"
test_bin=$b/tests/ce/linear_ce_gpu_test
timeout ${TEST_TIMEOUT:-180} $test_bin --gtest_filter="${TEST_FILTER:-LinearCeGpu.*Kl*}" \
  >"$out/tests.log" 2>&1
echo "tests (sm90 loop) rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests.log" | tr '\n' ' ')"
TILEJIT_CE_LOOP=portable timeout 120 $test_bin --gtest_filter="${TEST_FILTER:-LinearCeGpu.*Kl*}" \
  >"$out/tests_portable.log" 2>&1
echo "tests (portable) rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests_portable.log" | tr '\n' ' ')"
for tool in ${SANITIZERS-memcheck synccheck racecheck}; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $test_bin \
    --gtest_filter='LinearCeGpu.KlForwardClusters' >"$out/sanitize_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize_$tool.log")"
done
grep -q "FAILED" "$out/tests.log" && exit 1
for round in ${ROUNDS:-1 2}; do
  for c in ${CLUSTERS:-1 2 4}; do
    timeout ${BENCH_TIMEOUT:-150} $b/bench/linear_ce_gpu_bench --kl-cluster $c "$@" \
      >"$out/bench_c${c}_r$round.log" 2>&1
    echo "cluster $c round $round rc=$?"
    grep -E "^ *(ce_kl|shape|mode)|fwd" "$out/bench_c${c}_r$round.log" | grep -v '^{' | head -6
  done
done
