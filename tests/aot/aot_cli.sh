#!/bin/sh
# aot_cli.sh TILEJIT WORK_DIR
# The deployment flow through the `tilejit` tool: `aot` builds a bundle, `compile` loads it with
# TILEJIT_OFFLINE=1 (no compile; a program left out fails naming it), a bundle from another
# version is refused, `cache verify` finds a truncated entry, two `aot` runs racing into one
# directory leave a valid bundle, and `cache prune` empties it.
set -u
tj=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1

fail() { echo "FAILED: $*"; exit 1; }
expect() {  # expect RC COMMAND...: run COMMAND, output in out.txt, exit status must be RC
  want=$1; shift
  "$@" > out.txt 2>&1
  got=$?
  [ "$got" -eq "$want" ] || { cat out.txt; fail "$* exited $got, expected $want"; }
}

# A tool built without the aot and cache commands prints its usage and exits 2: skip.
"$tj" cache ls --dir "$work/none" > /dev/null 2>&1
[ $? -eq 2 ] && { echo "SKIPPED: this tilejit has no aot/cache commands"; exit 77; }

printf 'attention cli_causal {\n  mask = q >= kv\n}\n' > causal.tj
printf 'attention cli_window {\n  param window : i32\n  mask = q >= kv && q - kv < window\n}\n' > window.tj
printf '# one program, a small variant\ncausal.tj dtype=fp16 head_dim=64\n' > manifest.txt

expect 0 "$tj" aot manifest.txt --arch sm_90a --out bundle --jobs 2
grep -q '"program": "cli_causal"' bundle/index.json || fail "index.json does not list cli_causal"
kernels=$(grep -c '"key":' bundle/index.json)

export TILEJIT_CACHE_DIR="$work/bundle" TILEJIT_OFFLINE=1
expect 0 "$tj" compile causal.tj --arch sm_90a --dtype fp16 --head-dim 64 --emit cubin
[ "$(grep -c '(disk hit)' out.txt)" -eq "$kernels" ] || { cat out.txt; fail "not every kernel was a disk hit"; }
expect 1 "$tj" compile window.tj --arch sm_90a --dtype fp16 --head-dim 64 --emit cubin
grep -q "program 'cli_window', variant 'dense_mask', arch sm_90a" out.txt || { cat out.txt; fail "miss does not name the program"; }

cp -r bundle other
sed 's/"tilejit_version": "[^"]*"/"tilejit_version": "0.0.0-other"/' bundle/index.json > other/index.json
TILEJIT_CACHE_DIR="$work/other" expect 1 "$tj" compile causal.tj --arch sm_90a --dtype fp16 --head-dim 64
grep -q "built by tilejit 0.0.0-other" out.txt || { cat out.txt; fail "version mismatch not reported"; }
unset TILEJIT_CACHE_DIR TILEJIT_OFFLINE

entry=$(ls other/*.tjk | head -n 1)
head -c 500 "$entry" > truncated && mv truncated "$entry" && chmod 600 "$entry"
expect 1 "$tj" cache verify --dir other
grep -q "BAD $entry" out.txt || { cat out.txt; fail "verify missed the truncated entry"; }
expect 0 "$tj" cache verify --dir other --fix
expect 0 "$tj" cache verify --dir other

"$tj" aot manifest.txt --arch sm_90a --out race --jobs 1 > race1.txt 2>&1 &
first=$!
"$tj" aot manifest.txt --arch sm_90a --out race --jobs 1 > race2.txt 2>&1
second=$?
wait $first || { cat race1.txt; fail "first concurrent aot failed"; }
[ $second -eq 0 ] || { cat race2.txt; fail "second concurrent aot failed"; }
expect 0 "$tj" cache verify --dir race
[ "$(grep -c '"key":' race/index.json)" -eq "$kernels" ] || fail "race/index.json is incomplete"
ls race | grep -q '\.tmp\.' && fail "temp files left behind"

expect 0 "$tj" cache prune --dir race --max-bytes 0
expect 0 "$tj" cache ls --dir race
grep -q "^0 entries" out.txt || { cat out.txt; fail "prune left entries"; }
echo "aot_cli: all checks passed"
