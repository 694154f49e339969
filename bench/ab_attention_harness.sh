#!/usr/bin/env bash
# A / B of the attention kernels: the standalone harness (tests/gpu/attention_harness.cu, same
# templates, hand-written hooks) built from a base source tree and from this one, run one after
# the other on the same GPU, perf lines side by side. The base tree is any checkout or
# `git archive REV | tar -x -C DIR` of the project.
#   bench/ab_attention_harness.sh BASE_TREE OUTDIR
set -uo pipefail
base=${1:?usage: bench/ab_attention_harness.sh BASE_TREE OUTDIR}
out=${2:?usage: bench/ab_attention_harness.sh BASE_TREE OUTDIR}
here="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$out/base" "$out/head"
bash "$base/tests/gpu/build_attention_harness.sh" "$out/base" >"$out/base/build.log" 2>&1 &
bash "$here/tests/gpu/build_attention_harness.sh" "$out/head" >"$out/head/build.log" 2>&1 &
wait
for side in base head; do
  if [ -x "$out/$side/attention_harness" ]; then
    "$out/$side/attention_harness" "$out/$side" >"$out/$side/run.log" 2>&1
    echo "$side: rc=$?"
  else
    echo "$side: build failed"; tail -5 "$out/$side/build.log"
  fi
done
# perf NAME fwd ... | sm90 fwd X ms Y TF/s | ... | sm90 bwd X ms Y TF/s | ...: the sm90 columns
for side in base head; do
  grep '^perf' "$out/$side/run.log" 2>/dev/null | awk -v s=$side -F'|' '{
    split($1, a, " "); split($2, f, " "); split($5, b, " ");
    printf "%-5s %-28s sm90 fwd %7s TF/s  sm90 bwd %7s TF/s\n", s, a[2], f[5], b[5] }'
done | sort -k2,2 -s
