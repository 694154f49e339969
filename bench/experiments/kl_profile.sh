#!/usr/bin/env bash
# What bounds the KL kernels: one launch each of the KL forward and of the KL gradient tiles under
# `ncu --set full` (the bench's KL row, exact mode), their details pages as text and the reports
# in one tarball.
#   env: KERNELS (default "fwd_kl grad_kl"; fwd_bf16 adds the V 248k head's plain forward)
#   bench/experiments/kl_profile.sh OUTDIR [build dir, default build-gpu, already built]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: kl_profile.sh OUTDIR [build dir]}
b=${2:-build-gpu}
mkdir -p "$out/ncu"
args="--kinds zipf --shapes ce_kl_248k --modes exact --iters 1 --weight-grad bf16 --grad-outputs-at forward"
plain="--kinds zipf --shapes qwen_248k --modes exact --iters 1 --weight-grad bf16 --grad-outputs-at forward"
for k in ${KERNELS:-fwd_kl grad_kl}; do  # fwd_bf16: the plain forward of the V 248k head beside it
  timeout ${NCU_TIMEOUT:-200} ncu --set full --import-source yes -k regex:tj_linear_ce_${k}_ \
    --launch-count 1 -f -o "$out/ncu/$k" $b/bench/linear_ce_gpu_bench \
    $(case $k in *kl) echo "$args" ;; *) echo "$plain" ;; esac) >"$out/ncu/${k}_run.log" 2>&1
  echo "ncu $k rc=$?"
  ncu --import "$out/ncu/$k.ncu-rep" --page details >"$out/ncu/${k}_details.txt" 2>&1
  # Per SASS instruction: executed counts and stall samples (where the issue slots go).
  ncu --import "$out/ncu/$k.ncu-rep" --page source --csv --print-source sass \
    >"$out/ncu/${k}_sass.csv" 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Hit Rate|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc Active" \
    "$out/ncu/${k}_details.txt" | head -14 | sed "s/^/$k /"
done
tar -C "$out" -czf "$out/ncu.tgz" ncu && rm -rf "$out/ncu"
