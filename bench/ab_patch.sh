#!/usr/bin/env bash
# One GPU call for a kernel change kept as a patch (bench/experiments/*.patch): this tree with the
# patch applied runs its GPU tests (and, if asked, the sanitizers), then bench/ab_attention_bench.sh
# (AB_KIND=attention, the default) or bench/ab_ce_bench.sh (AB_KIND=ce: the fused loss) times it
# ("head") against this tree ("base"), both built once.
#   bench/ab_patch.sh OUTDIR PATCH [-- attention_gpu_bench or linear_ce_gpu_bench arguments]
# The builds can be made on another host (no GPU needed) and carried, so that the GPU's call only
# runs kernels:
#   bench/ab_patch.sh --prebuild DEST PATCH                  (builds into DEST, about 5 MB)
#   AB_PREBUILT=DEST bench/ab_patch.sh OUTDIR PATCH [-- ...] (on the GPU host: builds nothing)
# DEST/.prebuilt names the sources and the patch they were built from; a tree or patch that
# differs is refused.
#   env: TEST_FILTER (ctest -R of the patched tree, default AttentionGpu, or LinearCeGpu with
#          AB_KIND=ce; with AB_PREBUILT a gtest filter, default AttentionGpu.* or LinearCeGpu.*;
#          empty: no tests),
#        TEST_TIMEOUT (s, default 240: a kernel that hangs stops the tests there, and no timing
#          follows), SANITIZE_FILTER (a gtest filter run under memcheck, racecheck and synccheck
#          on the patched tree, default none), AB_WORK (build trees, default /tmp/ab_patch; kept
#          out of OUTDIR so that only logs come back: at most seven files), and
#          the A/B script's AB_ROUNDS (and ab_attention_bench.sh's AB_SPACERS)
set -uo pipefail
usage="usage: bench/ab_patch.sh OUTDIR PATCH [-- bench arguments] | --prebuild DEST PATCH"
prebuild=""
if [ "${1:-}" = --prebuild ]; then
  prebuild=$(realpath -m "${2:?$usage}")
  shift 2
  set -- "$prebuild/logs" "$@"
fi
out=${1:?$usage}
patch_file=$(realpath "${2:?$usage}") || { echo "$usage"; exit 2; }
shift 2
[ "${1:-}" = "--" ] && shift
here="$(cd "$(dirname "$0")/.." && pwd)"
work=${AB_WORK:-/tmp/ab_patch}
prebuilt=""
[ -n "${AB_PREBUILT:-}" ] && prebuilt=$(realpath "$AB_PREBUILT")
# What prebuilt binaries must come from: this tree's compiled sources and the patch.
stamp() {
  (cd "$here" && source bench/source_hash.sh && binaries_hash) &&
    md5sum <"$patch_file" | cut -d' ' -f1
}
case "${AB_KIND:-attention}" in  # the GPU test, the bench, the A/B script
  attention) test_bin=tests/attention/attention_gpu_test bench_bin=attention_gpu_bench
    ab_script=ab_attention_bench.sh default_filter=AttentionGpu ;;
  ce) test_bin=tests/ce/linear_ce_gpu_test bench_bin=linear_ce_gpu_bench
    ab_script=ab_ce_bench.sh default_filter=LinearCeGpu ;;
  *) echo "AB_KIND is attention or ce, not '$AB_KIND'"; exit 2 ;;
esac
test_filter=${TEST_FILTER-$default_filter}
[ -n "$prebuilt" ] && test_filter=${TEST_FILTER-$default_filter.*}
mkdir -p "$out" "$work"
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0))s"; }
summary="$out/summary.txt"
note() { echo "$*" | tee -a "$summary"; }

# The patched copy: this tree's sources (no build trees), the patch applied with git apply, which
# needs no repository.
rm -rf "$work/head" && mkdir -p "$work/head"
tar -C "$here" --exclude='./build*' --exclude='./.ab' --exclude='./.peers' --exclude='./.git' \
  -cf - . | tar -C "$work/head" -xf -
(cd "$work/head" && git apply "$patch_file") || { note "the patch does not apply to this tree"; exit 1; }
ln -sfn "$here" "$work/base"

# Both built where the A/B script looks (OUT/NAME/build), so it only re-runs CMake; or, with
# AB_PREBUILT, copied there from the carried folder.
if [ -n "$prebuilt" ]; then
  if [ "$(cat "$prebuilt/.prebuilt" 2>/dev/null)" != "$(stamp)" ]; then
    note "binaries in $prebuilt come from other sources or another patch: build them again"
    exit 1
  fi
  rm -rf "$work/ab" && mkdir -p "$work" && cp -r "$prebuilt/ab" "$work/ab"
  export LD_LIBRARY_PATH="$prebuilt/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" AB_PREBUILT=1
  export TILEJIT_TEST_SOURCE_DIR="$work/head"  # the example programs and goldens the tests read
  note "prebuilt binaries: $prebuilt"
else
  configure() {  # side
    mkdir -p "$work/ab/$1"
    cmake -S "$work/$1" -B "$work/ab/$1/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTILEJIT_WITH_LLVM=OFF -DTILEJIT_BUILD_BENCH=ON >"$out/$1_build.log" 2>&1
  }
  jobs=$(nproc)
  (configure base &&
    cmake --build "$work/ab/base/build" -j $((jobs / 3 + 1)) --target "$bench_bin" \
      >>"$out/base_build.log" 2>&1
    note "base build: rc=$? ($(elapsed))") &
  configure head &&
    cmake --build "$work/ab/head/build" -j "$jobs" --target "$(basename "$test_bin")" "$bench_bin" \
      >>"$out/head_build.log" 2>&1
  rc=$?
  note "head build: rc=$rc ($(elapsed))"
  wait
  [ $rc -eq 0 ] || { tail -20 "$out/head_build.log"; exit 1; }
fi
if [ -n "$prebuild" ]; then  # the binaries, stripped, and the one non-system library they link
  for side in base head; do
    bins=("bench/$bench_bin")
    [ $side = head ] && bins+=("$test_bin")
    for b in "${bins[@]}"; do
      install -D -m 755 -s "$work/ab/$side/build/$b" "$prebuild/ab/$side/build/$b" || exit 1
    done
  done
  mkdir -p "$prebuild/lib"
  ldd "$prebuild/ab/head/build/bench/$bench_bin" | awk '$3 ~ /libfmt/ {print $3}' |
    xargs -r cp -L -t "$prebuild/lib"
  stamp >"$prebuild/.prebuilt"
  note "prebuilt in $prebuild ($(du -sh "$prebuild" | cut -f1)); on the GPU host:" \
    "AB_PREBUILT=$prebuild bench/ab_patch.sh OUTDIR PATCH"
  exit 0
fi

tests_ok=1
if [ -n "$test_filter" ] && [ -n "$prebuilt" ]; then
  # (ctest's files name the building host's paths: the test executable runs directly)
  timeout "${TEST_TIMEOUT:-240}" "$work/ab/head/build/$test_bin" --gtest_filter="$test_filter" \
    --gtest_brief=1 >"$out/ctest.log" 2>&1
  rc=$?
  note "$(basename "$test_bin") --gtest_filter=$test_filter: rc=$rc ($(elapsed))" \
    "$(grep -E '^\[  (PASSED|SKIPPED)' "$out/ctest.log" | paste -sd' ')"
  grep -E '^\[  FAILED  \]' "$out/ctest.log" | head -20 | tee -a "$summary"
  [ $rc -eq 0 ] || tests_ok=0
elif [ -n "$test_filter" ]; then
  (cd "$work/ab/head/build" &&
    timeout "${TEST_TIMEOUT:-240}" ctest -R "$test_filter" --output-on-failure -j 4) \
    >"$out/ctest.log" 2>&1
  rc=$?
  note "ctest -R $test_filter: rc=$rc ($(elapsed))" \
    "$(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
  grep -E '^\s*[0-9]+/[0-9]+ Test .*(\*\*\*(Failed|Timeout|Exception)| Failed)' "$out/ctest.log" |
    tee -a "$summary"
  [ $rc -eq 0 ] || tests_ok=0
fi
if [ -n "${SANITIZE_FILTER:-}" ]; then
  for tool in memcheck racecheck synccheck; do  # one log for the three (few files come back)
    echo "==== $tool" >>"$out/sanitize.log"
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$work/ab/head/build/$test_bin" --gtest_filter="$SANITIZE_FILTER" \
      --gtest_brief=1 >"$work/$tool.log" 2>&1
    rc=$?
    tail -n 200 "$work/$tool.log" >>"$out/sanitize.log"
    note "$tool [$SANITIZE_FILTER]: rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' \
      "$work/$tool.log" | tail -1) ($(elapsed))"
  done
fi
# A kernel that hangs or fails its tests is not timed: its figures would mean nothing.
[ $tests_ok -eq 1 ] || { note "tests failed or timed out: no A/B"; exit 1; }

(cd "$work/head" && "bench/$ab_script" "$work/ab" "$work/base" -- "$@") >"$out/ab.txt" 2>&1
note "A/B: rc=$? ($(elapsed))"
runs=$(cd "$work/ab" && ls ./*.jsonl ./*.err ./*/ce_bench.* 2>/dev/null)
[ -n "$runs" ] && tar -czf "$out/ab_runs.tgz" -C "$work/ab" $runs
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>&1 | tee -a "$summary"
table=$(grep -nE '^(median|mean over the rounds)' "$out/ab.txt" | cut -d: -f1)
tail -n "+${table:-1}" "$out/ab.txt" | tail -40 | tee -a "$summary"
