#!/usr/bin/env bash
# SASS account of the generated kernels (needs cuobjdump: a CUDA toolkit with its binary
# utilities): every example program's modules compiled for ARCH by `tilejit compile`, then per
# kernel the registers and the instructions that decide its speed -- HGMMA (Hopper tensor cores),
# HMMA (mma.sync), MUFU (ex2, tanh, rcp: the 16-per-clock unit), I2F/F2I conversions, global
# loads (LDG), TMA (UTMALDG), local-memory spills (LDL/STL) -- as static counts in the code, one
# row per kernel of each module, with its registers and stack frame (bytes per thread).
#   bench/sass_stats.sh TILEJIT_BINARY OUTDIR [ARCH (sm_90a)] [programs...]
#   env: HEAD_DIM (the attention kernels' head dim, 64 or 128; default 128)
set -uo pipefail
tj=${1:?usage: bench/sass_stats.sh TILEJIT_BINARY OUTDIR [ARCH] [programs...]}
out=${2:?usage}
arch=${3:-sm_90a}
shift 3 2>/dev/null || shift $#
cd "$(dirname "$0")/.."
command -v cuobjdump >/dev/null ||
  { echo "sass_stats.sh: cuobjdump not found (it comes with the CUDA toolkit's binary utilities)" >&2; exit 1; }
progs=${*:-$(ls examples/programs/*.tj | xargs -n1 basename | sed 's/\.tj$//')}
mkdir -p "$out/cubin"
printf '%-22s %-44s %5s %5s %6s %5s %5s %5s %5s %4s %5s %5s %5s\n' program kernel regs stack \
  HGMMA HMMA EX2 TANH RCP I2F LDG UTMA LDL/STL
for p in $progs; do
  d="$out/cubin/$p"
  mkdir -p "$d"
  "$tj" compile "examples/programs/$p.tj" --arch "$arch" --head-dim "${HEAD_DIM:-128}" --emit cubin \
    --out "$d" >/dev/null 2>&1 ||
    { echo "$p: compile failed"; continue; }
  for f in "$d"/*.cubin; do
    cuobjdump -sass "$f" >"$f.sass" 2>/dev/null || continue
    cuobjdump -res-usage "$f" >"$f.res" 2>/dev/null
    # one file per kernel of the module: its SASS from its "Function : NAME" line to the next
    rm -f "$f".fn.*
    awk -v base="$f.fn." '/Function : /{name = $NF} name != "" {print > (base name)}' "$f.sass"
    for g in "$f".fn.*; do
      [ -e "$g" ] || continue
      k=${g##*.fn.}
      # registers and the stack frame (local memory, bytes per thread: spills and local arrays)
      res=$(grep -A1 "Function $k:" "$f.res" | tail -1)
      regs=$(grep -o 'REG:[0-9]*' <<<"$res" | cut -d: -f2)
      local_bytes=$(grep -o 'STACK:[0-9]*' <<<"$res" | cut -d: -f2)
      c() { grep -cE "$1" "$g"; }
      printf '%-22s %-44s %5s %5s %6s %5s %5s %5s %5s %4s %5s %5s %5s\n' "$p" "${k:0:44}" \
        "${regs:-?}" "${local_bytes:-?}" "$(c 'HGMMA')" "$(c 'HMMA')" "$(c 'MUFU\.EX2')" \
        "$(c 'MUFU\.TANH')" "$(c 'MUFU\.RCP')" "$(c 'I2F')" "$(c 'LDG')" "$(c 'UTMALDG')" \
        "$(c ' (LDL|STL)')"
    done
  done
done
