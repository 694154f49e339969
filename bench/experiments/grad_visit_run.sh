#!/usr/bin/env bash
# The plain gradient tiles in the grouped visiting order (grad_visit_plain.patch, applied here to
# the copy this runs in), one build: the CE GPU tests, then the three heads with and without it
# (TJ_NO_VISIT=1, the patch's A/B switch: pair_list's order), interleaved.
#   bench/experiments/grad_visit_run.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: grad_visit_run.sh OUTDIR}
mkdir -p "$out"
git apply bench/experiments/grad_visit_plain.patch || { echo "the patch does not apply"; exit 1; }
b=build-gpu
cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
  -DTILEJIT_BUILD_BENCH=ON >"$out/configure.log" 2>&1 &&
  cmake --build $b -j "$(nproc)" --target linear_ce_gpu_bench linear_ce_gpu_test >"$out/build.log" 2>&1
echo "build rc=$?"
timeout 70 $b/tests/ce/linear_ce_gpu_test --gtest_filter='LinearCeGpu.*' >"$out/tests.log" 2>&1
echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests.log" | tr '\n' ' ')"
common="--kinds zipf --iters 3 --weight-grad bf16 --grad-outputs-at forward --shapes gemma2_2b,llama3_8b,qwen_248k --modes exact,state"
for v in 1 0 1; do
  if [ $v = 1 ]; then unset TJ_NO_VISIT; else export TJ_NO_VISIT=1; fi
  timeout 60 $b/bench/linear_ce_gpu_bench $common 2>&1 | grep -E "^  (exact|state)" | sed "s/^/visit$v /"
done
