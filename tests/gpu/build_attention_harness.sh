#!/usr/bin/env bash
# Builds the standalone attention GPU harness (not part of the CMake build).
#   tests/gpu/build_attention_harness.sh OUTDIR [extra nvcc flags, e.g. -gencode=arch=compute_80,code=sm_80]
# Then run: OUTDIR/attention_harness OUTDIR   (add --no-perf for correctness only)
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [nvcc flags...]" >&2
  exit 2
fi
out="$1"
shift
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mkdir -p "$out"
arch_flags=(-gencode=arch=compute_90a,code=sm_90a)
if [[ $# -gt 0 ]]; then arch_flags=("$@"); fi
nvcc -std=c++17 -O3 "${arch_flags[@]}" -I"$repo" -lineinfo -Xptxas -v \
  "$repo/tests/gpu/attention_harness.cu" \
  "$repo/tests/support/AttentionReference.cpp" \
  "$repo/runtime/BlockMask.cpp" \
  -o "$out/attention_harness" -lcudart 2> "$out/ptxas.log" || { cat "$out/ptxas.log" >&2; exit 1; }
if grep -E "[1-9][0-9]* bytes spill" "$out/ptxas.log" >&2; then
  echo "warning: register spills (see $out/ptxas.log)" >&2
fi
echo "built $out/attention_harness"
