#!/usr/bin/env bash
# Builds the standalone fused linear cross-entropy GPU harness (not part of the CMake build).
# Usage: tests/gpu/build_linear_ce_harness.sh OUTDIR [extra nvcc flags...]
# Then:  OUTDIR/linear_ce_harness [--check-only | --only CASE] [--kinds zipf,flat,peaked]
set -euo pipefail
out=${1:?usage: $0 OUTDIR [nvcc flags...]}
shift
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I"$repo" -Xcompiler -Wall \
  "$repo/tests/gpu/linear_ce_harness.cu" \
  "$repo/tests/support/LinearCeReference.cpp" \
  "$repo/runtime/LinearCeWorkspace.cpp" \
  "$repo/runtime/VocabOrderPlan.cpp" \
  -o "$out/linear_ce_harness" "$@"
echo "built $out/linear_ce_harness"
