#!/usr/bin/env bash
# One device call for issues 14/15 that makes use of whichever card comes: on an H200 the suite's
# rows of SUITE_OPS with every contestant (benchmarks/suite_h200.sh, which a later call resumes
# until it says "sequence finished"); on another card one `atrex calibrate` and one `atrex bench`
# of SUITE_OPS with every contestant (BENCH_S bounds it), packed as $OUT/bench.tgz; with
# FORCE_SWEEP=1 the sampling kernel's launch sweep from round GRIDS_FROM of
# benchmarks/small_ops_h200.py, then (NCU_TOO=1) ncu of its committed constants, as
# $OUT/callF.tgz. On the H200, SWEEP_FIRST and NCU_FIRST (below) sweep and profile ops before
# its suite rows. ON_OTHER=skip runs nothing on a card other than the H200 (a call that only
# wants the H200's rows gives the other card back at once). CALL_S=<the call's timeout_s> skips
# a sweep or profile that could outlast the call and keeps the suite's wait inside it.
#   device: ATREX_COMMIT=<sha> [FORCE_SWEEP=1] [GRIDS_FROM=-5] [NCU_TOO=0] \
#           bash benchmarks/suite_or_sampling_sweep.sh            (carry: [".whl"])
set -u
# true when a step needing $1 more seconds could run past CALL_S (never without CALL_S)
outlasts_call() { [ -n "${CALL_S:-}" ] && [ $(( SECONDS + $1 )) -gt "$CALL_S" ]; }
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $name"
export ATREX_COMMIT=${ATREX_COMMIT:?ATREX_COMMIT=<sha> names the results}
if echo "$name" | grep -q H200 && [ "${FORCE_SWEEP:-0}" != 1 ]; then
  # before the suite rows, only in the call that starts the sequence:
  if [ ! -e "${WORK:-/tmp/suite-h200}/started" ]; then
    # SWEEP_FIRST="small_ops:kv_cache_append:-2": each op's launch sweep from that round of
    # benchmarks/<script>_h200.py (no ncu, SWEEP_S seconds each), into $OUT/sweep-<op>/
    for item in ${SWEEP_FIRST:-}; do
      IFS=: read -r script op round <<< "$item"
      if outlasts_call $(( ${SWEEP_S:-150} + 70 )); then
        echo "sweep $op skipped: it could outlast CALL_S"; continue
      fi
      OUT=$OUT/sweep-$op SCRIPT=benchmarks/${script}_h200.py OPS=$op NCU=0 \
        SWEEP_ARGS="--grids-from $round" SWEEP_S=${SWEEP_S:-150} \
        SWEEP_KILL_S=$(( ${SWEEP_S:-150} + 50 )) bash benchmarks/sweep_h200.sh
      tail -4 "$OUT/sweep-$op/sweep.log"
    done
    # NCU_FIRST="small_ops:fused_add_rmsnorm:compile gemm:gemm_decode:eager": ncu of each op's
    # kb kernels beside the named contestant's, from benchmarks/<script>_h200.py, into
    # $OUT/ncu-<op>/
    for item in ${NCU_FIRST:-}; do
      IFS=: read -r script op who <<< "$item"
      if outlasts_call $(( ${NCU_S:-90} * 2 + 40 )); then
        echo "ncu of $op skipped: it could outlast CALL_S"; continue
      fi
      OUT=$OUT/ncu-$op SCRIPT=benchmarks/${script}_h200.py OPS=$op SWEEP=0 NCU=1 \
        NCU_CONTESTANTS="kb $who" NCU_S=${NCU_S:-90} bash benchmarks/sweep_h200.sh
      cat "$OUT/ncu-$op/ncu-summary.md" 2>/dev/null | cut -c1-200
    done
  fi
  export OPS=${SUITE_OPS:-"top_k_top_p_sampling gemm_decode"}
  export BASELINES=${SUITE_BASELINES:-eager,compile,library,kb}
  # CALL_S: the device call's own limit; the wait for the suite rows ends 20 s before it (the
  # sweeps above take what they take), so their tgz is packed before the call is cut
  wait_s=${WAIT_S:-530}
  if [ -n "${CALL_S:-}" ]; then
    left=$(( CALL_S - SECONDS - 20 ))
    [ "$left" -lt "$wait_s" ] && wait_s=$(( left > 0 ? left : 0 ))
  fi
  export REPEAT_RUNS=0 WEIGHTS=0 SKIP_TESTS=1 WAIT_S=$wait_s
  OUT=$OUT bash benchmarks/suite_h200.sh
elif [ "${ON_OTHER:-bench}" = skip ] && [ "${FORCE_SWEEP:-0}" != 1 ]; then
  echo "not an H200 and ON_OTHER=skip: nothing run"
elif [ "${FORCE_SWEEP:-0}" != 1 ]; then
  bench=${BENCH_WORK:-/tmp/suite-bench}
  rm -rf "$bench" && mkdir -p "$bench"
  export ATREX_CACHE_DIR=$bench/atrex-cache PYTHONUNBUFFERED=1
  py=${PYTHON:-python3}
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv > "$bench/nvidia-smi.txt" 2>&1
  "$py" -m atrex calibrate > "$bench/calibrate.log" 2>&1
  cp "$ATREX_CACHE_DIR"/calibration-*.json "$bench/" 2>/dev/null
  ops=()
  for op in ${SUITE_OPS:-top_k_top_p_sampling gemm_decode}; do ops+=(--op "$op"); done
  timeout "${BENCH_S:-450}" "$py" -m atrex bench benchmarks/suite \
    --baselines "${BENCH_BASELINES:-eager,compile,library,kb}" "${ops[@]}" \
    --compile-cache "$bench/inductor-cache" \
    --json "$bench/bench.json" --markdown "$bench/bench.md" > "$bench/bench.log" 2>&1
  echo "bench rc $?" >> "$bench/bench.log"
  tail -40 "$bench/bench.md" 2>/dev/null; tail -3 "$bench/bench.log"
  echo "$ATREX_COMMIT" > "$bench/commit.txt"
  . "$(dirname "$0")/versions.sh" && write_versions "$py" "$bench/versions.txt"
  tar czf "$OUT/bench.tgz" -C "$bench" --exclude=./atrex-cache --exclude=./inductor-cache .
else
  sweep=/tmp/sampling-sweep
  rm -rf "$sweep" && mkdir -p "$sweep"
  OUT=$sweep SCRIPT=benchmarks/small_ops_h200.py OPS=top_k_top_p_sampling \
    SWEEP_ARGS="--grids-from ${GRIDS_FROM:--5}" SWEEP_S=${SWEEP_S:-300} \
    SWEEP_KILL_S=${SWEEP_KILL:-380} NCU=${NCU_TOO:-1} NCU_S=60 bash benchmarks/sweep_h200.sh
  tail -30 "$sweep/sweep.log"
  echo "$ATREX_COMMIT" > "$sweep/commit.txt"  # versions.txt: sweep_h200.sh writes it
  tar czf "$OUT/callF.tgz" -C "$sweep" .
fi
