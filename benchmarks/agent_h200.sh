#!/usr/bin/env bash
# The agent on one H200: starting from deliberately naive but correct Triton kernels
# (benchmarks/agent_naive/<op>), run `atrex optimize` (as `python -m atrex.agent optimize`, the same
# command) with the autotune and kb proposers, and collect under $OUT, per operator:
#   <op>/attempts.jsonl   every attempt (proposer, status, roofline fraction, gain, reason, diff)
#   <op>/kernel.py        the final kernel;  <op>/summary.json  before/after numbers
#   <op>/report_before.json, <op>/report_after.json   the runner's reports of the final A/B run
#   <op>.log              the progress display;  environment.txt;  summary.md  (before/after table)
#
# Usage:  benchmarks/agent_h200.sh [op ...]          (default: rmsnorm silu_and_mul)
# Knobs (environment): OUT (default out/agent_h200), DEVICE (cuda; "cpu" checks the plumbing
# without timing), MAX_ITERS (8), GPU_MINUTES (2.5 per operator, evaluations + ncu included),
# TIMING_MAX_SECONDS (3, per shape and round), NCU (auto|off), AUTOTUNE_BATCH (4), SEED (0).
# Needs only torch + triton (no openai / PyGithub / GitPython): run from the repository root.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-out/agent_h200}"
DEVICE="${DEVICE:-cuda}"
MAX_ITERS="${MAX_ITERS:-8}"
GPU_MINUTES="${GPU_MINUTES:-2.5}"
TIMING_MAX_SECONDS="${TIMING_MAX_SECONDS:-3}"
NCU="${NCU:-auto}"
AUTOTUNE_BATCH="${AUTOTUNE_BATCH:-4}"
SEED="${SEED:-0}"
PYTHON="${PYTHON:-python3}"
if [ "$#" -gt 0 ]; then OPS=("$@"); else OPS=(rmsnorm silu_and_mul); fi

export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"

{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "ops: ${OPS[*]}  device: $DEVICE  max_iters: $MAX_ITERS  gpu_minutes: $GPU_MINUTES"
  echo "timing_max_seconds: $TIMING_MAX_SECONDS  ncu: $NCU  autotune_batch: $AUTOTUNE_BATCH"
  "$PYTHON" - <<'PY'
import platform, torch
try:
    import triton
    tv = triton.__version__
except ImportError:
    tv = None
print(f"python {platform.python_version()}  torch {torch.__version__}  triton {tv}  "
      f"cuda {torch.version.cuda}")
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0))
PY
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm --format=csv
  command -v ncu >/dev/null && ncu --version | tail -1 || echo "ncu: not found"
} > "$OUT/environment.txt" 2>&1

status=0
for op in "${OPS[@]}"; do
  echo "== $op" >&2
  start=$(date +%s)
  "$PYTHON" -m atrex.agent optimize benchmarks/agent_naive --op "$op" --proposer autotune,kb \
      --max-iters "$MAX_ITERS" --gpu-minutes "$GPU_MINUTES" --device "$DEVICE" --ncu "$NCU" \
      --timing-max-seconds "$TIMING_MAX_SECONDS" --autotune-batch "$AUTOTUNE_BATCH" \
      --seed "$SEED" --out "$OUT/$op" 2>&1 | tee "$OUT/$op.log"
  code=${PIPESTATUS[0]}
  echo "$op: exit $code, wall $(( $(date +%s) - start )) s" | tee -a "$OUT/environment.txt" >&2
  [ "$code" -ne 0 ] && status=$code
  rm -rf "$OUT/$op/candidates"/*/__pycache__
done

"$PYTHON" benchmarks/agent_h200_summary.py "$OUT" "${OPS[@]}" > "$OUT/summary.md" || status=$?
cat "$OUT/summary.md"
exit $status
