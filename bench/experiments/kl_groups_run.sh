#!/usr/bin/env bash
# The KL forward against the row group (TILEJIT_CE_GROUP): for each group, this tree and, where
# given, another source tree (e.g. `git archive REV | tar -x -C DIR`, a patch applied there) timed
# on the KL row in alternating order, then one forward launch of each under ncu for its DRAM bytes
# and L2 hit rate. At the power cap the forward's time follows its bytes (bench/NOTES.md, the
# forty-first session), so the two columns say whether a group moves the bytes and the time alike.
#   bench/experiments/kl_groups_run.sh OUTDIR [TREE]
#   env: GROUPS_CE (default "11 6 22"), KL_MODES (default exact), ROUNDS (default 2)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: kl_groups_run.sh OUTDIR [TREE]}
other=${2:-}
mkdir -p "$out"
t0=$(date +%s)
say() { echo "$* ($(($(date +%s) - t0))s)" | tee -a "$out/summary.txt"; }
nvidia-smi --query-gpu=name,clocks.sm,power.limit --format=csv,noheader | tee -a "$out/summary.txt"
build() {  # source build-dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
    -DTILEJIT_BUILD_BENCH=ON >/dev/null 2>&1 && cmake --build "$2" -j 8 --target linear_ce_gpu_bench
}
sides=head
build . build-gpu >"$out/build_head.log" 2>&1 &
pids=$!
if [ -n "$other" ]; then
  sides="other head"
  build "$other" build-other >"$out/build_other.log" 2>&1 &
  pids="$pids $!"
fi
wait $pids  # (named: a bare wait would also wait for any process substitution)
for side in $sides; do
  bin=build-$([ $side = head ] && echo gpu || echo other)/bench/linear_ce_gpu_bench
  [ -x "$bin" ] && say "build $side ok" || { say "build $side FAILED"; exit 1; }
done
kl="--kinds zipf --weight-grad bf16 --grad-outputs-at forward --shapes ce_kl_248k"
for g in ${GROUPS_CE:-11 6 22}; do
  order=$sides
  for round in $(seq "${ROUNDS:-2}"); do
    for side in $order; do
      bin=build-$([ $side = head ] && echo gpu || echo other)/bench/linear_ce_gpu_bench
      TILEJIT_CE_GROUP=$g TILEJIT_CACHE_DIR=/tmp/tj-cache-$side timeout 90 $bin $kl --iters 3 \
        --modes "${KL_MODES:-exact}" 2>&1 | grep -E "^  (exact|state)" |
        sed "s/^/G $g $side /" | tee -a "$out/summary.txt"
    done
    order=$(echo $order | tr ' ' '\n' | tac | tr '\n' ' ')
  done
  for side in $sides; do
    bin=build-$([ $side = head ] && echo gpu || echo other)/bench/linear_ce_gpu_bench
    TILEJIT_CE_GROUP=$g TILEJIT_CACHE_DIR=/tmp/tj-cache-$side timeout 90 ncu --metrics \
      gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
      -k regex:tj_linear_ce_fwd_kl_ --launch-count 1 $bin $kl --iters 1 --modes exact \
      >"$out/ncu_G${g}_$side.log" 2>&1
    grep -E "gpu__time|dram__bytes|hit_rate" "$out/ncu_G${g}_$side.log" |
      awk -v p="G $g $side ncu" '{print p, $1, $(NF-1), $NF}' | tee -a "$out/summary.txt"
  done
  say "G $g done"
done
