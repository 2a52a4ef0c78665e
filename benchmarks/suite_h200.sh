#!/usr/bin/env bash
# The hot-op suite on the H200 (issue 6): calibration, ONE `atrex bench` run over the whole suite,
# then the GPU tests and five repeated checks of the example rmsnorm (launch-bound timing).
#
# The whole sequence outlasts one 10-minute device command, so the first call starts it in its own
# process session (it runs on between calls while the machine is held) and every call, the first
# included, waits up to WAIT_S seconds and packs whatever exists into $OUT/suite-h200.tgz. Call it
# again, back to back (the machine goes back when idle), until `rc.*` files show every stage done.
#
#   device: ATREX_COMMIT=<sha> WAIT_S=560 bash benchmarks/suite_h200.sh
#   here:   tar xzf <files_at>/suite-h200.tgz -C benchmarks/results/h200-suite/
#
# OPS="silu_and_mul rope" limits the bench to some operators; DEVICE=cpu runs the sequence here.
set -u
OUT=${OUT:-out/suite-h200}
WORK=${WORK:-/tmp/suite-h200}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT" "$WORK"

start_sequence() {
  echo "commit: ${ATREX_COMMIT:-unknown}" > "$WORK/commit.txt"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
    --format=csv > "$WORK/nvidia-smi.txt" 2>&1 || true
  local op_args=""
  for op in ${OPS:-}; do op_args="$op_args --op $op"; done
  export WORK DEVICE op_args
  setsid bash -c '
    export ATREX_CACHE_DIR=/tmp/atrex-cache PYTHONUNBUFFERED=1
    stage() { local name=$1; shift; "$@" > "$WORK/$name.log" 2>&1; echo $? > "$WORK/rc.$name"; }
    if [ "$DEVICE" = cuda ]; then
      stage calibrate python3 -m atrex calibrate --out "$WORK/calibration.json"
    fi
    stage bench python3 -m atrex bench benchmarks/suite --baselines eager,compile,kb \
      --device "$DEVICE" $op_args --json "$WORK/h200-suite.json" \
      --markdown "$WORK/h200-suite.md" --plot "$WORK/h200-suite.png"
    if [ "$DEVICE" = cuda ]; then
      stage gpu-tests python3 -m pytest -q -m gpu tests/runner
      stage repeat python3 benchmarks/runner_repeat.py examples/kernels rmsnorm 5 \
        "$WORK/repeat-h200.json"
    fi
    touch "$WORK/finished"
  ' < /dev/null > "$WORK/sequence.log" 2>&1 &
}

[ -e "$WORK/started" ] || { touch "$WORK/started"; start_sequence; }
deadline=$((SECONDS + ${WAIT_S:-540}))
while [ ! -e "$WORK/finished" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 5; done
for f in "$WORK"/rc.*; do [ -e "$f" ] && echo "${f##*/}: $(cat "$f")"; done
[ -e "$WORK/finished" ] && echo "sequence finished" || echo "sequence still running"
tail -n 5 "$WORK"/bench.log 2>/dev/null
tar czf "$OUT/suite-h200.tgz" -C "$WORK" .
