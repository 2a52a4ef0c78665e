#!/usr/bin/env bash
# The runner's H200 evidence (issue 3), in one device call:
#   calibration, `atrex check examples/kernels`, five repeated runs of one kernel, atrex vs ncu,
#   the adversarial corpus on the GPU, and the GPU-marked tests.
# Usage on the device machine: OUT=<dir> bash benchmarks/runner_h200.sh
set -u
OUT=${OUT:-out/h200}
mkdir -p "$OUT"
export ATREX_CACHE_DIR=/tmp/atrex-cache PYTHONUNBUFFERED=1
# ATREX_COMMIT: the commit these results come from (set by the caller; the device copy has no .git)
echo "commit: ${ATREX_COMMIT:-unknown}" > "$OUT/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  | tee "$OUT/nvidia-smi.txt"
python3 -m atrex calibrate 2>&1 | tee "$OUT/calibrate.log"
cp "$ATREX_CACHE_DIR"/calibration-*.json "$OUT/" 2>/dev/null
python3 -m atrex check examples/kernels --json "$OUT/examples-h200.json" \
  --markdown "$OUT/examples-h200.md" --plot "$OUT/examples-h200.png" 2>&1 | tail -40
python3 benchmarks/runner_repeat.py examples/kernels rmsnorm 5 "$OUT/repeat-h200.json"
ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:rmsnorm \
  --log-file "$OUT/ncu.csv" python3 benchmarks/ncu_vs_atrex.py driver examples/kernels/rmsnorm \
  prefill-8192 20 >/dev/null 2>&1
python3 benchmarks/ncu_vs_atrex.py compare "$OUT/ncu.csv" "$OUT/examples-h200.json" rmsnorm \
  prefill-8192 "$OUT/ncu-vs-atrex-h200.json"
if [ "${SKIP_CORPUS:-0}" != 1 ]; then
  python3 benchmarks/adversarial_gpu.py "$OUT/adversarial-h200.json" 2>&1 | tail -40
fi
if [ "${SKIP_PYTEST:-0}" != 1 ]; then
  python3 -m pytest -q -m gpu tests/runner -p no:cacheprovider 2>&1 | tail -15
fi
