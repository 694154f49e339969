#!/usr/bin/env bash
# Fuzz the text-form parser with libFuzzer for a bounded time.
#   scripts/fuzz_parser.sh [SECONDS]      (default 60)
# Builds tests/fuzz/parser_fuzzer with clang in build-fuzz/ (the libraries too, instrumented
# for coverage, ASan and UBSan), then runs it on tests/fuzz/corpus. New inputs go to
# build-fuzz/fuzz-corpus, crashes to build-fuzz/fuzz-artifacts/; the seed corpus is not touched.
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TILEJIT_FUZZ_BUILD_DIR:-$root/build-fuzz}"
sanitizers="address,undefined"

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,$sanitizers" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,$sanitizers -fno-sanitize-recover=undefined" \
  -DTILEJIT_WITH_LLVM=OFF -DTILEJIT_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target parser_fuzzer

mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts"
# -max_len bounds inputs to program-sized texts; the timeout catches pathological slowness.
"$build/tests/fuzz/parser_fuzzer" \
  -max_total_time="$seconds" -max_len=4096 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/" \
  "$build/fuzz-corpus" "$root/tests/fuzz/corpus"
