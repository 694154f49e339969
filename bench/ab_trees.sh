# Sourced by the A/B scripts (bench/ab_*_bench.sh): parses "OUTDIR TREE... [-- bench arguments]"
# with $usage and the default bench arguments in the array `default_args` set by the caller.
# Sets out, here (this checkout), names and trees (each tree's directory name and absolute path,
# this checkout last as "head"), args, and jobs (build jobs per side). With AB_PREBUILT=1 a side
# whose bench is already at OUTDIR/NAME/build/bench/ (bench/ab_patch.sh --prebuild) is not built.
out=${1:?$usage}
shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
names=() trees=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  trees+=("$(cd "$1" && pwd)") || { echo "$usage"; exit 2; }
  names+=("$(basename "$1")")
  shift
done
[ ${#trees[@]} -gt 0 ] || { echo "$usage"; exit 2; }
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=("${default_args[@]}")
names+=(head) trees+=("$here")
mkdir -p "$out"
jobs=$(( $(nproc) / ${#trees[@]} > 0 ? $(nproc) / ${#trees[@]} : 1 ))
# Whether side $1's bench $2 was built elsewhere and is to be run as it is (AB_PREBUILT=1).
ab_prebuilt() { [ "${AB_PREBUILT:-0}" = 1 ] && [ -x "$out/$1/build/bench/$2" ]; }
