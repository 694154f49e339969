#!/usr/bin/env bash
# Set up a fresh development machine (Debian/Ubuntu with the CUDA toolkit), then configure and
# build tilejit into ./build. Idempotent: installs only what is missing.
#   scripts/setup.sh            # Release build in ./build
#   BUILD_DIR=out scripts/setup.sh -DTILEJIT_SANITIZE=ON   # extra CMake arguments pass through
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

packages=(cmake ninja-build g++ make libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
          python3-numpy python3-venv python3-pip python3-setuptools python3-wheel)
# Optional: the LLVM CPU backend and the parser fuzzer (clang). Installed when the
# distribution has them; the build works without.
optional=(llvm-dev clang)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
opt_missing=()
for p in "${optional[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || ls /usr/lib/llvm-1[4-9]/lib/cmake/llvm >/dev/null 2>&1 || opt_missing+=("$p")
done
if [ ${#opt_missing[@]} -gt 0 ]; then
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${opt_missing[@]}" ||
    echo "setup: optional packages ${opt_missing[*]} not installed (LLVM backend/fuzzer off)"
fi

# The CUDA toolkit (headers + NVRTC) does not come from apt here: it must be installed already.
cuda_root=${CUDA_HOME:-/usr/local/cuda}
if [ ! -e "$cuda_root/include/nvrtc.h" ] && ! command -v nvcc >/dev/null; then
  echo "setup: the CUDA toolkit (NVRTC and headers) is required; set CUDA_HOME" >&2
  exit 1
fi
export PATH="$cuda_root/bin:$PATH"

# The Python package's tests need an interpreter with numpy: the one on PATH, else the system's
# (where the packages above put numpy), so a PATH python without numpy does not turn them off.
python_args=()
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null 2>&1 && "$py" -c "import numpy" >/dev/null 2>&1; then
    python_args=(-DPython3_EXECUTABLE="$(command -v "$py")")
    break
  fi
done
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${python_args[@]}" "$@"
cmake --build "$build_dir" -j "$(nproc)"
