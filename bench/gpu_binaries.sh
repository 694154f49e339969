#!/usr/bin/env bash
# Builds on this host (no GPU needed; LLVM off, as on the GPU host) what bench/gpu_check.sh runs,
# and copies it into DEST laid out as a build tree, for a GPU host that should spend its time
# running kernels rather than compiling:
#   bench/gpu_binaries.sh DEST [BUILD_DIR]      (BUILD_DIR default build-gpu-host)
#   then on the GPU host: TILEJIT_GPU_BUILD=DEST bench/gpu_check.sh OUTDIR [steps...]
# DEST holds the GPU test executables, the GPU benches, the CLI, libtilejit_c, the two standalone
# harnesses, the non-system shared libraries they link (DEST/lib), `.prebuilt` (the sources'
# hash: gpu_check.sh refuses binaries built from other sources) and `.prebuilt_sources` (each
# file's md5sum, to name the files that differ). Stripped, about 30 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:?usage: bench/gpu_binaries.sh DEST [BUILD_DIR]}
bdir=${2:-build-gpu-host}
source bench/source_hash.sh
case "$(realpath -m "$dest")" in
  "$(realpath -m "$bdir")" | "$(realpath .)" | /) echo "gpu_binaries.sh: refusing DEST $dest" >&2; exit 1 ;;
esac

# The executables whose tests launch kernels (the rest of the suite runs in CI).
gpu_tests=(tests/attention/attention_gpu_test tests/attention/attention_api_test
  tests/ce/linear_ce_gpu_test tests/ce/linear_ce_api_test tests/codegen/tilejit_dense_mask_gpu_tests
  tests/codegen/tilejit_codegen_tests tests/mask/tilejit_classify_gpu_tests
  tests/runtime/runtime_driver_test tests/runtime/runtime_kernel_cache_test
  tests/cpu/cpu_row_hooks_test)
programs=("${gpu_tests[@]}" bench/attention_gpu_bench bench/linear_ce_gpu_bench tools/tilejit)
targets=(tilejit_c)
for p in "${programs[@]}"; do
  t=$(basename "$p")
  [ "$t" = tilejit ] && t=tilejit_cli  # the CLI's target; its executable is `tilejit`
  targets+=("$t")
done

cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
  -DTILEJIT_BUILD_BENCH=ON >/dev/null
cmake --build "$bdir" -j "$(nproc)" --target "${targets[@]}"

rm -rf "$dest"
mkdir -p "$dest/lib" "$dest/capi" "$dest/harness"
for p in "${programs[@]}"; do install -D -m 755 -s "$bdir/$p" "$dest/$p"; done
# the Python package loads it by this name (TILEJIT_LIBRARY); a file, not links, since links may
# not survive the copy to the GPU host
install -m 755 -s "$bdir/capi/libtilejit_c.so" "$dest/capi/libtilejit_c.so"
for name in attention linear_ce; do
  bash "tests/gpu/build_${name}_harness.sh" "$dest/harness" >/dev/null
done
# fmt is the one shared library outside glibc, the toolchain and CUDA that the programs link
ldd "$dest"/tools/tilejit "$dest"/bench/* | awk '$3 ~ /libfmt/ {print $3}' | sort -u |
  xargs -r cp -L -t "$dest/lib"
binaries_sources >"$dest/.prebuilt_sources"
binaries_hash >"$dest/.prebuilt"
echo "prebuilt binaries in $dest ($(du -sh "$dest" | cut -f1)), sources $(cat "$dest/.prebuilt")"
