#!/usr/bin/env bash
# The hot-op suite on the H200 (issues 12 and 17), in one detached sequence of two lanes:
#   lane A: 1. `atrex calibrate`: measured ceilings and the launch floor (cached, so the bench
#              uses them)
#           2. ONE `atrex bench benchmarks/suite --baselines eager,compile,library,kb` (JSON,
#              Markdown, figures; the JSON is rewritten after every operator, `complete` false
#              until the end)
#   lane B: 3. benchmarks/weights_h200.sh: a profiled small Llama turned into suite weights
#              (WEIGHTS=0 leaves it out)
#           4. benchmarks/repeat_suite.py: five fresh runs of the launch-bound and large shapes
#              (after the calibration, so they use the same ceilings)
#           5. the GPU tests (tests/runner -m gpu)
# With two GPUs visible (LANES=2, the default when nvidia-smi lists two or more) lane A runs on
# GPU 0 and lane B on GPU 1 at the same time, so the whole sequence fits one device lease; with
# one GPU lane B follows lane A on it. Each lane holds its GPU alone (CUDA_VISIBLE_DEVICES).
#
# Budget, measured on the H200 (2026-12-04, benchmarks/results/h200-suite-partial and
# h200-suite-16aba9f): calibrate under 1 min; the bench 1078 s for the first 14 of 21 shapes with
# compile really compiling (max-autotune; the MoE references' compiles take minutes), so ~26 min
# for all 21: more than one lease with the machine's start-up, hence --resume; weights under 1
# min; one repeat run 77-91 s for the 4 launch-bound shapes, so ~3 min per run of all 10
# (REPEAT_MAX_S stops it before a run that would not fit, and a later call resumes it); the GPU
# tests 4.5 min. On one GPU that outlasts a 30-minute device lease: with two, run it as two
# lanes; with one, split it over sessions (OPS, REPEAT_SHAPES, SKIP_TESTS). That outlasts a 10-minute device command, so the first call copies the tree to
# $WORK/tree (later calls get a fresh copy of the repository; the running sequence must not see
# its code change) and starts the sequence there in its own session (setsid): it runs on between
# calls while the machine is held. Every call, the first included, waits up to WAIT_S seconds
# and packs what exists into $OUT/suite-h200.tgz. Call again, back to back (the machine goes back
# when idle), until it says "sequence finished"; `rc.<stage>` files say how each stage ended.
#
#   here:   echo /.whl/ >> .git/info/exclude; pip download --no-deps -d .whl liger-kernel==0.8.5
#   device: ATREX_COMMIT=<sha> WAIT_S=560 bash benchmarks/suite_h200.sh   (carry: [".whl"])
#   here:   mkdir -p benchmarks/results/h200-suite && tar xzf <files_at>/suite-h200.tgz -C $_
#
# The bench runs with --resume: a sequence cut short (the lease ended mid-bench) goes on in a
# later lease from what came back, with RESUME_FROM=<a folder of the tree holding its
# h200-suite.json, h200-suite.reports.json and calibration-*.json>; the calibration is reused
# (the same ceilings for both parts) and `atrex bench` refuses other hardware or software.
# A new sequence needs ATREX_COMMIT (the device copy has no .git; the results must name it).
# The compile baseline keeps Inductor's cache in $WORK/inductor-cache (`--compile-cache`): within
# a lease, max-autotune's first choices are reused instead of drawn afresh by every process.
#
# OPS="silu_and_mul rope" limits the bench; BASELINES, COMPILE_MODE, REPEAT_RUNS, REPEAT_SHAPES,
# REPEAT_MAX_S, SKIP_TESTS=1, GPU_TESTS (pytest node ids of the GPU tests to run, default all of
# tests/runner), WEIGHTS=0, LANES=1|2 adjust the stages (REPEAT_RUNS=0 SKIP_TESTS=1
# WEIGHTS=0 leave only calibrate and the bench: the run that fits one lease on one GPU);
# DEVICE=cpu runs the sequence on this machine (tests/runner/test_suite_script.py does, as a smoke
# test; TINY=1 and the weights script's BATCH/PROMPT/STEPS shrink its model). PYTHON picks the
# interpreter.
set -u
OUT=${OUT:-out/suite-h200}
WORK=${WORK:-/tmp/suite-h200}
DEVICE=${DEVICE:-cuda}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT" "$WORK"

gpu_count() {
  if [ "$DEVICE" = cuda ]; then nvidia-smi -L 2>/dev/null | grep -c '^GPU'; else echo 1; fi
}

start_sequence() {
  echo "commit: ${ATREX_COMMIT:-unknown}" > "$WORK/commit.txt"
  nvidia-smi --query-gpu=index,name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv > "$WORK/nvidia-smi.txt" 2>&1 || true
  rm -rf "$WORK/tree" && mkdir -p "$WORK/tree"
  tar --exclude=./.git --exclude=./.venv --exclude=./out --exclude='*/__pycache__' -cf - . \
    | tar -xf - -C "$WORK/tree"
  if [ -n "${RESUME_FROM:-}" ]; then
    cp "$RESUME_FROM"/h200-suite.json "$RESUME_FROM"/h200-suite.reports.json "$WORK/" || return 1
    mkdir -p "$WORK/atrex-cache"
    cp "$RESUME_FROM"/calibration-*.json "$WORK/atrex-cache/" 2>/dev/null && \
      echo "resumed from: $RESUME_FROM (its calibration reused)" >> "$WORK/commit.txt"
  fi
  local op_args=""
  for op in ${OPS:-}; do op_args="$op_args --op $op"; done
  local lanes=${LANES:-}
  if [ -z "$lanes" ]; then [ "$(gpu_count)" -ge 2 ] && lanes=2 || lanes=1; fi
  echo "lanes: $lanes" >> "$WORK/commit.txt"
  export WORK DEVICE PYTHON op_args lanes
  export BASELINES=${BASELINES:-eager,compile,library,kb}
  export COMPILE_MODE=${COMPILE_MODE:-max-autotune-no-cudagraphs}
  export REPEAT_RUNS=${REPEAT_RUNS:-5} REPEAT_MAX_S=${REPEAT_MAX_S:-600}
  export REPEAT_SHAPES=${REPEAT_SHAPES:-} SKIP_TESTS=${SKIP_TESTS:-0} WEIGHTS=${WEIGHTS:-1}
  export GPU_TESTS=${GPU_TESTS:-tests/runner}
  (cd "$WORK/tree" && setsid bash -c '
    export ATREX_CACHE_DIR=$WORK/atrex-cache PYTHONUNBUFFERED=1
    stage() { local name=$1; shift; "$@" > "$WORK/$name.log" 2>&1; echo $? > "$WORK/rc.$name"; }
    lane_a() {
      if [ "$DEVICE" = cuda ] && compgen -G "$ATREX_CACHE_DIR/calibration-*.json" > /dev/null; then
        echo 0 > "$WORK/rc.calibrate"  # reused from the run this one resumes
        cp "$ATREX_CACHE_DIR"/calibration-*.json "$WORK/"
      elif [ "$DEVICE" = cuda ]; then
        stage calibrate "$PYTHON" -m atrex calibrate
        cp "$ATREX_CACHE_DIR"/calibration-*.json "$WORK/" 2>/dev/null
      fi
      stage bench "$PYTHON" -m atrex bench benchmarks/suite --baselines "$BASELINES" \
        --compile-mode "$COMPILE_MODE" --compile-cache "$WORK/inductor-cache" \
        --device "$DEVICE" $op_args --resume \
        --json "$WORK/h200-suite.json" --markdown "$WORK/h200-suite.md" \
        --plot "$WORK/h200-suite-roofline.png" --bars "$WORK/h200-suite-fractions.png"
    }
    lane_b() {
      if [ "$WEIGHTS" = 1 ]; then
        stage weights env OUT="$WORK/weights" bash benchmarks/weights_h200.sh
      fi
      if [ "$DEVICE" = cuda ]; then
        while [ ! -e "$WORK/rc.calibrate" ]; do sleep 5; done
      fi
      if [ "$REPEAT_RUNS" != 0 ]; then
        stage repeat "$PYTHON" benchmarks/repeat_suite.py "$WORK/repeat-h200.json" \
          --device "$DEVICE" --runs "$REPEAT_RUNS" --max-seconds "$REPEAT_MAX_S" \
          ${REPEAT_SHAPES:+--shapes "$REPEAT_SHAPES"}
      fi
      if [ "$DEVICE" = cuda ] && [ "$SKIP_TESTS" != 1 ]; then
        stage gpu-tests "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" -m gpu \
          --durations=20 $GPU_TESTS
      fi
    }
    # wheels carried to a machine with no package registry (Liger-Kernel for the library peers),
    # installed into the interpreter: the executors do not inherit PYTHONPATH (bench-c14eadc)
    if [ "$DEVICE" = cuda ] && compgen -G ".whl/*.whl" > /dev/null; then
      "$PYTHON" -m pip install -q --no-index --no-deps .whl/*.whl > "$WORK/wheels.log" 2>&1
    fi
    . benchmarks/versions.sh && write_versions "$PYTHON" "$WORK/versions.txt"
    "$PYTHON" -m pip list 2>/dev/null | grep -i "^liger" >> "$WORK/versions.txt"
    if [ "$lanes" = 2 ]; then
      CUDA_VISIBLE_DEVICES=0 lane_a > "$WORK/lane-a.log" 2>&1 &
      CUDA_VISIBLE_DEVICES=1 lane_b > "$WORK/lane-b.log" 2>&1 &
      wait
    else
      lane_a; lane_b
    fi
    touch "$WORK/finished"
  ' < /dev/null > "$WORK/sequence.log" 2>&1 &)
}

if [ ! -e "$WORK/started" ]; then
  if [ -z "${ATREX_COMMIT:-}" ]; then
    echo "ATREX_COMMIT=<sha> is needed to start a sequence (the results name their commit)." \
      "Is the machine that ran the earlier calls gone? Then this call starts afresh." >&2
    exit 2
  fi
  touch "$WORK/started"
  start_sequence || { rm -f "$WORK/started"; echo "RESUME_FROM=$RESUME_FROM lacks h200-suite.json or" \
    "h200-suite.reports.json" >&2; exit 2; }
fi
deadline=$((SECONDS + ${WAIT_S:-540}))
while [ ! -e "$WORK/finished" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 5; done
for f in "$WORK"/rc.*; do [ -e "$f" ] && echo "${f##*/}: $(cat "$f")"; done
[ -e "$WORK/finished" ] && echo "sequence finished" || echo "sequence still running"
tail -n 3 "$WORK"/bench.log "$WORK"/repeat.log "$WORK"/weights.log 2>/dev/null
tar czf "$OUT/suite-h200.tgz" -C "$WORK" --exclude=./tree --exclude=./atrex-cache \
  --exclude=./inductor-cache .
