#!/usr/bin/env bash
# One call on a GPU host: configure, build (LLVM off), run the GPU tests and the kernel
# harnesses, optionally the peers, and print a short table last. Logs and JSON go to OUTDIR.
#   bench/gpu_check.sh OUTDIR [tests] [python] [sanitize] [soak] [bench] [attention] [ce] [peers]
#                             [cepeers] [cebench] [cetimes] [timeline] [sass] [profile] [bands]
#                             [sustained]
#   env: CTEST_ARGS (e.g. "-R Gpu"), BENCH_ARGS (--quick), BENCH_SPACERS (e.g. "3 29": one bench
#        process per memory placement), PACK=1 (the files but the summary into OUTDIR.tgz),
#        TILEJIT_GPU_BUILD (build dir; or a folder of binaries from bench/gpu_binaries.sh, which
#        are run as they are, with no build here: each test executable whole, one after the
#        other, CTEST_ARGS not applied),
#        PY_TEST_TIMEOUT, COMPARE_TIMEOUT (s, default 120 each: the python step stays under
#        ~4 min), COMPARE_ARGS (default "--quick --repeats 10"), BANDS (the bands step's
#        TILEJIT_ATTENTION_BAND values, default "1 2 4 8"), BANDS_ARGS (its bench arguments),
#        SUSTAINED_ARGS (bench/sustained_compare.py's, e.g. --cases "2,8192,64" --seconds 3)
#   (default: tests attention ce)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/gpu_check.sh OUTDIR [steps...]}
shift
steps=${*:-tests attention ce}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ " $steps " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader | tee "$out/gpu.txt"
jobs=$(nproc)
bdir=${TILEJIT_GPU_BUILD:-build-gpu}  # build tree, kept between calls on the GPU host

source bench/source_hash.sh
# Binaries built elsewhere by bench/gpu_binaries.sh (TILEJIT_GPU_BUILD=their folder): nothing is
# built here, and they must come from these sources (their kernel templates are built in).
prebuilt=0
if [ -f "$bdir/.prebuilt" ]; then
  prebuilt=1
  if [ "$(cat "$bdir/.prebuilt")" != "$(binaries_hash)" ]; then
    note "prebuilt binaries in $bdir come from other sources: rebuild them with bench/gpu_binaries.sh"
    binaries_sources | diff "$bdir/.prebuilt_sources" - | grep '^[<>]' | head -10 | tee -a "$summary"
    exit 1
  fi
  export LD_LIBRARY_PATH="$(cd "$bdir" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TILEJIT_TEST_SOURCE_DIR="$PWD"  # the example programs and goldens the tests read
  missing=$(find "$bdir" -type f -executable -exec ldd {} + 2>/dev/null | grep 'not found' | sort -u)
  if [ -n "$missing" ]; then
    note "prebuilt binaries in $bdir need libraries this host lacks:"; note "$missing"
    exit 1
  fi
  note "prebuilt binaries: $bdir"
fi
if has tests && [ $prebuilt = 1 ]; then
  # ctest's files name the building host's paths: the GPU test executables run directly
  t0=$(date +%s)
  failed=0
  for exe in $(find "$bdir/tests" -type f -executable | sort); do
    log="$out/test_$(basename "$exe").log"
    timeout 600 "$exe" --gtest_brief=1 >"$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || failed=$((failed + 1))
    note "test $(basename "$exe"): rc=$rc $(grep -E '^\[  PASSED  \]' "$log" | tail -1)" \
      "$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}[.,].*/\1 skipped/p' "$log")"
    grep -E '^\[  FAILED  \]' "$log" | head -10 | tee -a "$summary"
  done
  note "tests: $failed executables failed ($(( $(date +%s) - t0 ))s)"
  $bdir/tools/tilejit demo >"$out/demo.log" 2>&1
  note "demo: rc=$?"; tail -15 "$out/demo.log"
elif has tests; then
  # A tree unpacked by `git archive` carries its commit's time on every file, which can be older
  # than a kept build's outputs: ninja would then keep the last tree's objects (and its embedded
  # kernel templates). When the sources differ from the last build's, every file is made newer.
  t0=$(date +%s)
  hash=$(source_hash)
  if [ -f "$bdir/.source_hash" ] && [ "$(cat "$bdir/.source_hash")" != "$hash" ]; then
    find CMakeLists.txt cmake compiler runtime kernels_templates capi dsl tools tests bench \
      examples python -type f -exec touch {} +
  fi
  cmake -S . -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release -DTILEJIT_WITH_LLVM=OFF \
    -DTILEJIT_BUILD_BENCH=ON >"$out/configure.log" 2>&1 &&
    cmake --build $bdir -j "$jobs" >"$out/build.log" 2>&1
  rc=$?
  note "build: rc=$rc ($(( $(date +%s) - t0 ))s)"
  [ $rc -eq 0 ] && echo "$hash" >"$bdir/.source_hash"
  if [ $rc -eq 0 ]; then
    ctest --test-dir $bdir --output-on-failure -j 8 ${CTEST_ARGS:-} >"$out/ctest.log" 2>&1
    note "ctest: rc=$? $(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1)"
    grep -E '^\s*[0-9]+/[0-9]+ Test .*(Failed|\*\*\*)' "$out/ctest.log" | head -20 | tee -a "$summary"
    $bdir/tools/tilejit demo >"$out/demo.log" 2>&1
    note "demo: rc=$?"; tail -15 "$out/demo.log"
  else
    tail -30 "$out/build.log"
  fi
fi

# libtilejit_c for the Python steps, configuring the build tree where no `tests` step did
build_capi() {
  [ $prebuilt = 1 ] && return
  [ -f "$bdir/CMakeCache.txt" ] || cmake -S . -B $bdir -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DTILEJIT_WITH_LLVM=OFF -DTILEJIT_BUILD_BENCH=ON >"$out/configure.log" 2>&1
  cmake --build $bdir -j "$jobs" --target tilejit_c >>"$out/build.log" 2>&1
}
if has python; then
  # The Python package's unittest suite with the interpreter CMake found (torch with CUDA), then
  # bench/compare.py --quick, both on this build's libtilejit_c. Counts come from the per-test
  # lines, so a run cut short by its timeout still reports what ran.
  t0=$(date +%s)
  py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$bdir/CMakeCache.txt" 2>/dev/null)
  py=${py:-python3}
  build_capi
  lib="$(cd "$bdir" && pwd)/capi/libtilejit_c.so"
  note "python: $("$py" -c 'import sys, torch; print(sys.executable, "torch", torch.__version__,
    "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
  (cd python/tests && TILEJIT_LIBRARY="$lib" PYTHONDONTWRITEBYTECODE=1 \
    timeout ${PY_TEST_TIMEOUT:-120} "$py" -m unittest discover -s . -p 'test_*.py' -v) \
    >"$out/python_tests.log" 2>&1
  rc=$?
  count() { grep -cE "$1" "$out/python_tests.log"; }
  # "name (module.Class.name) ... ok", the verdict on a line of its own after output on stderr
  note "python tests: rc=$rc passed $(count '(^| \.\.\. )ok$') failed $(count '(^| \.\.\. )FAIL$')" \
    "errors $(count '(^| \.\.\. )ERROR$') skipped $(count ' \.\.\. skipped') (CUDA tests skipped:" \
    "$(count "skipped 'no CUDA")) $(grep -E '^(Ran|OK|FAILED)' "$out/python_tests.log" | tr '\n' ' ')"
  grep -E '^(FAIL|ERROR): ' "$out/python_tests.log" | head -20 | tee -a "$summary"
  timeout ${COMPARE_TIMEOUT:-120} "$py" bench/compare.py --lib "$lib" --out "$out/compare" \
    ${COMPARE_ARGS:---quick --repeats 10} >"$out/compare.log" 2>&1
  note "compare.py: rc=$? ($(( $(date +%s) - t0 ))s for the python step)"
  if grep -qE '^(attention|fused linear)' "$out/compare.log"; then
    sed -n '/^\(attention\|fused linear\)/,$p' "$out/compare.log" | tee -a "$summary"
  else
    tail -15 "$out/compare.log"
  fi
fi

run_harness() {  # name
  local name=$1 dir="$bdir/harness"
  mkdir -p "$dir"
  if [ $prebuilt = 1 ] ||
    bash "tests/gpu/build_${name}_harness.sh" "$dir" >"$out/${name}_build.log" 2>&1; then
    timeout 300 "$dir/${name}_harness" "$out" >"$out/${name}.log" 2>&1
    note "$name harness: rc=$?"
    grep -vE '^\{' "$out/${name}.log" | tail -40
    grep -E '^\{' "$out/${name}.log" >"$out/${name}.jsonl"
  else
    note "$name harness: build failed"; tail -30 "$out/${name}_build.log"
  fi
}
if has sanitize && [ -x $bdir/tests/attention/attention_gpu_test ]; then
  # memcheck, racecheck and synccheck over a representative subset; the cache is warm by now
  san() {  # tool test filter
    local n="$1_$(basename $2)"
    timeout 200 compute-sanitizer --tool $1 --error-exitcode 9 $bdir/tests/$2 \
      --gtest_filter="$3" --gtest_brief=1 >"$out/$n.log" 2>&1
    note "$1 $(basename $2) [$3]: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$n.log" | tail -1)"
  }
  san memcheck attention/attention_gpu_test "AttentionGpu.EdgeShapes"
  san racecheck attention/attention_gpu_test "AttentionGpu.EdgeShapes"
  # the persistent backward's CTAs walking many items (its grid capped by the test)
  for tool in memcheck racecheck synccheck; do
    san $tool attention/attention_gpu_test "AttentionGpu.BackwardSeveralItemsPerCta"
  done
  san memcheck ce/linear_ce_gpu_test "*Gaps*:*ThreeSegments*:*AllRowsIgnored*:*KlSharedWeightsExact*:*KlOwnTeacher*:*AcrossStreams*"
  san racecheck ce/linear_ce_gpu_test "*SegmentsWithGapsFiltered*:*KlSharedWeightsExact*"
  # barrier misuse in the mbarrier rings (a warp-divergent or mismatched barrier)
  san synccheck ce/linear_ce_gpu_test "*SegmentsWithGapsFiltered*:*OrderedByAverageLogit*"
  san memcheck mask/tilejit_classify_gpu_tests "*IndexOnly*"
fi
if has soak && [ -x $bdir/tests/codegen/tilejit_dense_mask_gpu_tests ]; then
  fails=0
  for seed in $(seq 1 ${SOAK_SEEDS:-40}); do
    TILEJIT_TEST_SEED=$seed $bdir/tests/codegen/tilejit_dense_mask_gpu_tests --gtest_filter="*HookValues*" --gtest_brief=1 \
      >>"$out/soak.log" 2>&1 || { fails=$((fails+1)); echo "seed $seed failed" >>"$out/soak.log"; }
  done
  note "hook values soak: $fails of ${SOAK_SEEDS:-40} seeds failed"
fi

has attention && run_harness attention
has ce && run_harness linear_ce

if has sustained; then
  # tilejit against cuDNN for seconds at a time, with the SM clock and power sampled beside:
  # the steady state of a training step, where the power limit sets the clock
  build_capi
  timeout ${SUSTAINED_TIMEOUT:-300} python3 bench/sustained_compare.py --lib "$bdir" --out "$out" \
    ${SUSTAINED_ARGS:-} >"$out/sustained.log" 2>&1
  note "sustained: rc=$?"
  grep -E "^ *([0-9]+|B) " "$out/sustained.log" | tee -a "$summary"
fi

if has bench && [ -x $bdir/bench/attention_gpu_bench ]; then
  # a fresh kernel cache, so the first placement's first_call_s is the cold compile of each
  # program's kernels; BENCH_SPACERS (e.g. "3 29"): one process per --spacer-mb value (where
  # the buffers land moves the backward by up to 10%), the table their medians
  rm -rf /tmp/tilejit-bench-cache
  spacers=${BENCH_SPACERS:-none}
  for s in $spacers; do
    place=() file="$out/attention_bench.jsonl"
    [ "$s" != none ] && place=(--spacer-mb "$s") file="$out/attention_bench_s$s.jsonl"
    TILEJIT_CACHE_DIR=/tmp/tilejit-bench-cache timeout ${BENCH_TIMEOUT:-400} \
      $bdir/bench/attention_gpu_bench ${BENCH_ARGS:-} "${place[@]}" >"$file" 2>"${file%.jsonl}.err"
    note "attention bench [${place[*]}]: rc=$? $(wc -l <"$file") rows, SM clock after:" \
      "$(nvidia-smi --query-gpu=clocks.sm --format=csv,noheader)"
    tail -5 "${file%.jsonl}.err"
  done
  python3 - "$out"/attention_bench*.jsonl <<'PY' | tee -a "$summary"
import collections, json, statistics, sys
rows, scaling = collections.defaultdict(list), []
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        if r["system"] == "tilejit":
            rows[(r["mask"], r["S"], r["D"], r["H"], r["Hkv"])].append(r)
        elif path == sys.argv[1]:
            scaling.append(r)
for (mask, S, D, H, Hkv), rs in rows.items():
    f = statistics.median(r["fwd_tflops"] for r in rs)
    b = statistics.median(r["bwd_tflops"] for r in rs)
    per = "/".join(f'{r["fwd_tflops"]:.0f}' for r in rs)
    print(f'{mask:22s} S={S:6d} D={D} H/Hkv={H}/{Hkv:<2d} fwd {f:6.1f} bwd {b:6.1f} TFLOP/s '
          f'[fwd {per}]  mask gpu {rs[0]["mask_build_ms"]:.2f} ms cpu '
          f'{rs[0]["mask_build_cpu_ms"]:.2f} ms  first {rs[0]["first_call_s"]:.2f} s')
for r in scaling:
    print(f'mask analysis S={r["S"]:8d}: gpu {r["mask_build_ms"]:.2f} ms cpu {r["mask_build_cpu_ms"]:.2f} ms {r["mask_bytes"]} B')
PY
fi

# bands: the attention bench once per schedule band (TILEJIT_ATTENTION_BAND, one process each),
# causal and documents at S 2k, 8k and 32k unless BANDS_ARGS says otherwise, fwd / bwd TFLOP/s.
if has bands && [ -x $bdir/bench/attention_gpu_bench ]; then
  band_args=(--masks causal,document_causal --shapes "8,16,2048,128,16;2,16,8192,128,16;1,16,32768,128,16"
    --reps 10 --no-scaling)
  [ -n "${BANDS_ARGS:-}" ] && read -ra band_args <<<"$BANDS_ARGS"
  for band in ${BANDS:-1 2 4 8}; do
    TILEJIT_ATTENTION_BAND=$band TILEJIT_CACHE_DIR=/tmp/tilejit-bench-cache timeout 150 \
      $bdir/bench/attention_gpu_bench "${band_args[@]}" >"$out/bands_$band.jsonl" 2>"$out/bands_$band.err"
    note "band $band: rc=$? SM clock after $(nvidia-smi --query-gpu=clocks.sm --format=csv,noheader)"
    python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("  %-18s B=%d S=%6d fwd %6.1f bwd %6.1f" % (r["mask"], r["B"], r["S"], r["fwd_tflops"], r["bwd_tflops"]))
' "$out/bands_$band.jsonl" | tee -a "$summary"
  done
fi
if has peers && [ -d .peers ]; then
  # PEER_SHAPES: "B,H,S,D[,Hkv];..." runs that subset (bench/run_peers.py); unset: the full script
  if [ -n "${PEER_SHAPES:-}" ]; then
    RESULTS_DIR=$out PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-400} python3 bench/run_peers.py \
      .peers "$PEER_SHAPES" ${PEER_FLAGS:-} >"$out/flex_peers.log" 2>&1
  else
    RESULTS_DIR=$out PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-400} python3 \
      .peers/flex_attention_peers.py >"$out/flex_peers.log" 2>&1
  fi
  note "flex peers: rc=$?"; tail -40 "$out/flex_peers.log"
fi
# cebench: the fused linear CE through the public path (bench/linear_ce_gpu_bench), fresh kernel
# cache; env CE_KINDS (data kinds, default zipf; also the peers' KINDS), CE_BENCH_ARGS (default
# --iters 5), CE_BENCH_TIMEOUT. With cepeers too: bench/plot_ce.py draws $out/ce.png.
ce_kinds=${CE_KINDS:-zipf}
if has cebench && [ -x $bdir/bench/linear_ce_gpu_bench ]; then
  rm -rf /tmp/tilejit-ce-bench-cache
  TILEJIT_CACHE_DIR=/tmp/tilejit-ce-bench-cache timeout ${CE_BENCH_TIMEOUT:-300} \
    $bdir/bench/linear_ce_gpu_bench --kinds "$ce_kinds" ${CE_BENCH_ARGS:---iters 5} \
    >"$out/ce_bench.jsonl" 2>"$out/ce_bench.err"
  note "ce bench: rc=$? $(wc -l <"$out/ce_bench.jsonl") rows"
  tail -5 "$out/ce_bench.err"
  python3 - "$out/ce_bench.jsonl" <<'PY' | tee -a "$summary"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    head = f'{r["shape"]:18s} {r["data"]:6s} {r["mode"]:8s}'
    if "error" in r:
        print(f'{head} error: {r["error"][:90]}')
        continue
    kept = r["surviving_fraction"]
    print(f'{head} fwd {r["fwd_ms"]:7.2f} ms  fwd+bwd {r["fwd_bwd_ms"]:7.2f} ms  extra '
          f'{r["fwd_bwd_mem_mb"] / 1024:5.2f} GB (outputs {r["grad_outputs_mb"] / 1024:4.2f})  '
          f'tiles {"n/a " if kept is None else f"{kept:.2f}"}  first {r["first_call_s"]:.1f} s')
PY
fi
if has cepeers && [ -d .peers ]; then
  rm -f "$out/torch_ce_peers.json"  # written at the end: present only when this run finished
  RESULTS_DIR=$out PYTHONUNBUFFERED=1 KINDS=$ce_kinds timeout 400 \
    python3 .peers/torch_ce_peers.py >"$out/ce_peers.log" 2>&1
  note "ce peers: rc=$?"; tail -20 "$out/ce_peers.log"
fi
if has cebench && has cepeers && [ -s "$out/ce_bench.jsonl" ] &&
  [ -s "$out/torch_ce_peers.json" ]; then
  python3 bench/plot_ce.py "$out/ce_bench.jsonl" "$out/torch_ce_peers.json" "$out/ce.png" \
    --data "${ce_kinds%%,*}" 2>&1 | tee -a "$summary"
fi
# cetimes: per-kernel GPU time of the fused loss (ncu, duration only, clocks and caches left as
# they are), summed by kernel name over a whole bench run of each CE_TIMES entry
# ("shape:mode ..."; default gemma2_2b:state gemma2_2b:exact), one table per entry.
if has cetimes && [ -x $bdir/bench/linear_ce_gpu_bench ]; then
  for e in ${CE_TIMES:-gemma2_2b:state gemma2_2b:exact}; do
    shape=${e%%:*} mode=${e##*:}
    TILEJIT_CACHE_DIR=/tmp/tilejit-ce-bench-cache timeout ${CE_TIMES_TIMEOUT:-150} ncu \
      --metrics gpu__time_duration.sum --clock-control none --cache-control none \
      -o "$out/cetimes_$e" -f $bdir/bench/linear_ce_gpu_bench --kinds zipf --shapes "$shape" \
      --modes "$mode" --iters 1 >"$out/cetimes_$e.log" 2>&1
    note "cetimes $e: rc=$?"
    ncu --import "$out/cetimes_$e.ncu-rep" --page raw --csv --metrics gpu__time_duration.sum \
      >"$out/cetimes_$e.csv" 2>&1
    python3 - "$out/cetimes_$e.csv" <<'PY' | tee -a "$summary"
import csv, collections, sys
rows = list(csv.reader(open(sys.argv[1])))
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
name_col, time_col = rows[head].index("Kernel Name"), rows[head].index("gpu__time_duration.sum")
scale = {"ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1, "ms": 1, "nsecond": 1e-6}
unit = scale.get(rows[head + 1][time_col].strip(), 1e-6)
total, count = collections.defaultdict(float), collections.Counter()
for r in rows[head + 2:]:
    if len(r) <= max(name_col, time_col): continue
    name = r[name_col].split("(")[0].strip()
    total[name] += float(r[time_col].replace(",", "")) * unit
    count[name] += 1
for name, t in sorted(total.items(), key=lambda kv: -kv[1]):
    print(f"  {name[:48]:48s} n={count[name]:4d} mean {t / count[name]:8.3f} ms  total {t:8.2f} ms")
PY
  done
fi
# timeline: each timed call of the fused loss traced launch by launch (TILEJIT_LAUNCH_TRACE,
# runtime/LaunchTrace.h), the GPU's idle time per call with its largest gaps and each kernel's
# time and launches per call (bench/launch_gaps.py); env CE_TIMELINE ("shape:mode ..."; default
# gemma2_2b:state gemma2_2b:exact), CE_TIMELINE_ARGS (more bench arguments, e.g.
# --grad-buffer-mb 64).
if has timeline && [ -x $bdir/bench/linear_ce_gpu_bench ]; then
  for e in ${CE_TIMELINE:-gemma2_2b:state gemma2_2b:exact}; do
    shape=${e%%:*} mode=${e##*:}
    rm -f "$out/timeline_$e.jsonl"
    TILEJIT_LAUNCH_TRACE="$out/timeline_$e.jsonl" TILEJIT_CACHE_DIR=/tmp/tilejit-ce-bench-cache \
      timeout 150 $bdir/bench/linear_ce_gpu_bench --kinds zipf --shapes "$shape" --modes "$mode" \
      --iters 3 ${CE_TIMELINE_ARGS:-} >"$out/timeline_$e.log" 2>&1
    note "timeline $e: rc=$?"
    python3 bench/launch_gaps.py "$out/timeline_$e.jsonl" 2>&1 | tee -a "$summary"
    python3 bench/launch_gaps.py "$out/timeline_$e.jsonl" --per-call --top 6 2>&1 | tee -a "$summary"
  done
fi
# sass: static instruction counts of the example programs' kernels (bench/sass_stats.sh; env
# SASS_PROGRAMS: which programs, default all).
if has sass && [ -x $bdir/tools/tilejit ]; then
  bash bench/sass_stats.sh "$(cd $bdir && pwd)/tools/tilejit" "$out/sass" sm_90a ${SASS_PROGRAMS:-} \
    >"$out/sass.txt" 2>&1
  note "sass: rc=$? ($out/sass.txt)"
  grep -E "program|fwd_sm90|bwd_sm90_bf16" "$out/sass.txt" | head -40
fi
# profile: ncu on one kernel per entry of PROFILE="name|bench args|kernel regex;..." (default:
# the Hopper attention forward and backward of a few masks at 8k), full set, details as text,
# and the stall samples per SASS instruction summed by bench/sass_stalls.py.
if has profile && [ -x $bdir/bench/attention_gpu_bench ]; then
  shape="--shapes 2,16,8192,128,16 --reps 1 --no-scaling"
  default="causal_fwd|--masks causal $shape|fwd_sm90;causal_bwd|--masks causal $shape|bwd_sm90"
  default+=";document_fwd|--masks document_causal $shape|fwd_sm90"
  default+=";alibi_fwd|--masks alibi_causal $shape|fwd_sm90;softcap_fwd|--masks softcap_causal $shape|fwd_sm90"
  # PROFILE: "name|harness args|kernel regex[|harness[|skip[|count]]]];..." (harness: a program
  # of $bdir/bench, default attention_gpu_bench; e.g. linear_ce_gpu_bench for the CE kernels;
  # skip / count: the matching launches skipped, then profiled, default 2 / 1)
  IFS=';' read -ra entries <<<"${PROFILE:-$default}"
  for e in "${entries[@]}"; do
    IFS='|' read -r name args regex harness skip count <<<"$e"
    TILEJIT_CACHE_DIR=/tmp/tilejit-bench-cache timeout ${PROFILE_TIMEOUT:-150} ncu --set full \
      --import-source yes -k "regex:$regex" --launch-skip "${skip:-2}" --launch-count "${count:-1}" \
      -o "$out/prof_$name" -f \
      $bdir/bench/${harness:-attention_gpu_bench} $args >"$out/prof_$name.log" 2>&1
    note "profile $name: rc=$?"
    ncu --import "$out/prof_$name.ncu-rep" --page details >"$out/prof_$name.txt" 2>&1
    ncu --import "$out/prof_$name.ncu-rep" --page raw >"$out/prof_$name.raw.txt" 2>&1
    # stall samples per SASS instruction (bench/sass_stalls.py: per opcode, reason, hot spot)
    ncu --import "$out/prof_$name.ncu-rep" --page source --csv --print-source sass \
      >"$out/prof_$name.sass.csv" 2>&1
    python3 bench/sass_stalls.py "$out/prof_$name.sass.csv" 30 >"$out/prof_$name.stalls.txt" 2>&1
    grep -E "^by reason" "$out/prof_$name.stalls.txt" | sed "s/^/  /" | tee -a "$summary"
    grep -E "sm__(inst_executed_pipe|pipe)_[a-z_]*(tensor|gmma|xu|fma|alu|lsu)[a-z_]*\.avg\.pct_of_peak_sustained_active " \
      "$out/prof_$name.raw.txt" | awk '$NF+0 > 5 {print "  " $1, $NF}' | tee -a "$summary"
    grep -E "^ +(Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per Thread|Issue Slots Busy|Executed Ipc Active|Achieved Occupancy|No Eligible) " \
      "$out/prof_$name.txt" | sed "s/^ */  /" | tee -a "$summary"
    # the largest stall reasons (cycles per issued instruction, summed over the launches)
    grep -E "smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio " \
      "$out/prof_$name.raw.txt" | awk '{v[$1] += $NF} END {for (k in v) print v[k], k}' |
      sort -rn | head -6 | sed "s/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//; s/^/  stall /" |
      tee -a "$summary"
  done
fi
# PACK=1: every file but the summary and the GPU line into one archive (a call returns few files)
if [ "${PACK:-0}" = 1 ]; then
  tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" &&
    find "$out" -mindepth 1 ! -name summary.txt ! -name gpu.txt -delete
fi
echo "==== summary ===="
cat "$summary"
