#!/usr/bin/env bash
# One GPU call for the KL pairs' joint steps (gemm_loop_sm90_ws_joint) and the plain gradient
# tiles' visiting order: this tree and BASE (a source tree of another commit, e.g.
# `git archive REV | tar -x -C DIR`) built side by side, the CE GPU tests on this tree (both tile
# loops for the KL ones), memcheck and racecheck on the KL test with a partly shared teacher,
# then the KL row and the three plain heads on both trees in alternating rounds.
#   env: PATCH (a patch applied to this tree's copy first, e.g. ce_fwd_l2_hints.patch),
#        TEST_FILTER (default LinearCeGpu.*), PORTABLE=0 (no portable-loop tests),
#        SANITIZE_FILTER (the tests under the sanitizers), SANITIZERS (default "memcheck
#        racecheck"; empty: none), KL_MODES (default exact,state),
#        PLAIN=0 (no plain heads), PLAIN_MODES (default exact,state), KL=0 (no KL row), KL_EXTRA (bench arguments: this tree's KL row again with them,
#        e.g. "--kl-cluster 2", as a third side of each round)
#   bench/experiments/kl_joint_run.sh OUTDIR BASE
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: kl_joint_run.sh OUTDIR BASE}
base=${2:?usage: kl_joint_run.sh OUTDIR BASE}
mkdir -p "$out"
if [ -n "${PATCH:-}" ]; then
  git apply "$PATCH" || patch -p1 <"$PATCH" || { echo "the patch does not apply"; exit 1; }
fi
exec > >(tee -a "$out/summary.txt") 2>&1  # the lines so far come back even if the call is cut
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0))s"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv,noheader
build() {  # source build-dir targets...
  local src=$1 dir=$2
  shift 2
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
    -DTILEJIT_BUILD_BENCH=ON >/dev/null 2>&1 && cmake --build "$dir" -j 8 --target "$@"
}
build . build-gpu linear_ce_gpu_test linear_ce_gpu_bench >"$out/build.log" 2>&1 &
head_build=$!
build "$base" build-base linear_ce_gpu_bench >"$out/build_base.log" 2>&1 &
base_build=$!
# The two builds only: a bare `wait` would also wait for the tee above, which never ends.
wait $head_build $base_build
echo "builds done $(elapsed): head $(test -x build-gpu/bench/linear_ce_gpu_bench && echo ok || echo FAILED), base $(test -x build-base/bench/linear_ce_gpu_bench && echo ok || echo FAILED)"
t=build-gpu/tests/ce/linear_ce_gpu_test
timeout 200 $t --gtest_filter="${TEST_FILTER:-LinearCeGpu.*}" >"$out/tests.log" 2>&1
echo "tests (sm90) rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests.log" | tr '\n' ' ') $(elapsed)"
grep -E '^\[  FAILED' "$out/tests.log" | head -5
if [ "${PORTABLE:-1}" = 1 ]; then
  TILEJIT_CE_LOOP=portable timeout 100 $t --gtest_filter='LinearCeGpu.*Kl*' \
    >"$out/tests_portable.log" 2>&1
  echo "tests (portable, KL) rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests_portable.log" | tr '\n' ' ') $(elapsed)"
fi
for tool in ${SANITIZERS-memcheck racecheck}; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $t \
    --gtest_filter="${SANITIZE_FILTER:-LinearCeGpu.KlTeacherSharingOneSegment}" \
    >"$out/sanitize_$tool.log" 2>&1
  echo "$tool rc=$? $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize_$tool.log") $(elapsed)"
done
kl="--kinds zipf --iters 3 --weight-grad bf16 --grad-outputs-at forward --shapes ce_kl_248k --modes ${KL_MODES:-exact,state}"
sides="base head base head"
[ -n "${KL_EXTRA:-}" ] && sides="base head extra base head extra"
[ "${KL:-1}" = 1 ] || sides=""
for side in $sides; do
  bin=build-$([ $side = base ] && echo base || echo gpu)/bench/linear_ce_gpu_bench
  extra=$([ $side = extra ] && echo "$KL_EXTRA")
  TILEJIT_CACHE_DIR=/tmp/tj-cache-$side timeout 90 $bin $kl $extra 2>&1 |
    grep -E "^  (exact|state)" | sed "s/^/kl $side /"
done
echo "KL done $(elapsed)"
plain="--kinds zipf --iters 3 --weight-grad bf16 --grad-outputs-at forward --shapes gemma2_2b,llama3_8b,qwen_248k --modes ${PLAIN_MODES:-exact,state}"
for side in $([ "${PLAIN:-1}" = 1 ] && echo base head base head); do
  bin=build-$([ $side = head ] && echo gpu || echo base)/bench/linear_ce_gpu_bench
  TILEJIT_CACHE_DIR=/tmp/tj-cache-$side timeout 60 $bin $plain 2>&1 |
    grep -E "^  (exact|state)" | sed "s/^/plain $side /"
done
echo "all done $(elapsed)"
