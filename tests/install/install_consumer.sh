#!/bin/sh
# install_consumer.sh CMAKE BUILD_DIR CONSUMER_SOURCE WORK_DIR GENERATOR
# Installs the build into WORK_DIR/prefix, then configures, builds and runs the consumer
# project against it; the consumer must print the program's 64-hex-digit hash, and the C
# consumer (through the C ABI) the same line without the NVRTC version.
set -eu
cmake_bin=$1 build=$2 consumer=$3 work=$4 generator=$5
rm -rf "$work"
mkdir -p "$work"
"$cmake_bin" --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/tilejit/runtime/KernelCache.h"
test -x "$work/prefix/bin/tilejit"
"$cmake_bin" -S "$consumer" -B "$work/build" -G "$generator" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
"$cmake_bin" --build "$work/build" -j2 > "$work/build.log"
out=$("$work/build/consumer")
echo "$out"
echo "$out" | grep -Eq '^tilejit [0-9.]+ \(NVRTC [0-9.]+\): causal [0-9a-f]{64}$'
out_c=$("$work/build/consumer_c")
echo "$out_c"
test "$out_c" = "$(echo "$out" | sed 's/ (NVRTC [0-9.]*)//')"
"$work/prefix/bin/tilejit" --version
