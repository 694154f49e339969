#!/usr/bin/env bash
# SASS account of the generated kernels (needs cuobjdump: a CUDA toolkit with its binary
# utilities): every example program's modules compiled for ARCH by `tilejit compile`, then per
# kernel the registers and the instructions that decide its speed -- HGMMA (Hopper tensor cores),
# HMMA (mma.sync), MUFU (ex2, tanh, rcp: the 16-per-clock unit), I2F/F2I conversions, global
# loads (LDG), TMA (UTMALDG), local-memory spills (LDL/STL) -- as static counts in the code.
#   bench/sass_stats.sh TILEJIT_BINARY OUTDIR [ARCH (sm_90a)] [programs...]
set -uo pipefail
tj=${1:?usage: bench/sass_stats.sh TILEJIT_BINARY OUTDIR [ARCH] [programs...]}
out=${2:?usage}
arch=${3:-sm_90a}
shift 3 2>/dev/null || shift $#
cd "$(dirname "$0")/.."
progs=${*:-$(ls examples/programs/*.tj | xargs -n1 basename | sed 's/\.tj$//')}
mkdir -p "$out/cubin"
printf '%-22s %-44s %5s %6s %5s %5s %5s %5s %4s %5s %5s %5s\n' program kernel regs HGMMA HMMA \
  EX2 TANH RCP I2F LDG UTMA LDL/STL
for p in $progs; do
  d="$out/cubin/$p"
  mkdir -p "$d"
  "$tj" compile "examples/programs/$p.tj" --arch "$arch" --emit cubin --out "$d" >/dev/null 2>&1 ||
    { echo "$p: compile failed"; continue; }
  for f in "$d"/*.cubin; do
    k=$(basename "$f" .cubin)
    cuobjdump -sass "$f" >"$f.sass" 2>/dev/null || continue
    regs=$(cuobjdump -res-usage "$f" 2>/dev/null | grep -o 'REG:[0-9]*' | head -1 | cut -d: -f2)
    c() { grep -cE "$1" "$f.sass"; }
    printf '%-22s %-44s %5s %6s %5s %5s %5s %5s %4s %5s %5s %5s\n' "$p" "${k:0:44}" "${regs:-?}" \
      "$(c 'HGMMA')" "$(c 'HMMA')" "$(c 'MUFU\.EX2')" "$(c 'MUFU\.TANH')" "$(c 'MUFU\.RCP')" \
      "$(c 'I2F')" "$(c 'LDG')" "$(c 'UTMALDG')" "$(c ' (LDL|STL)')"
  done
done
