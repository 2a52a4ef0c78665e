#!/usr/bin/env bash
# The short form of runner_h200.sh for a nearly spent lease: calibration, `atrex check
# examples/kernels` and the atrex-vs-ncu comparison only.  Usage: OUT=<dir> bash this
set -u
OUT=${OUT:-out/h200}
mkdir -p "$OUT"
export ATREX_CACHE_DIR=/tmp/atrex-cache PYTHONUNBUFFERED=1
echo "commit: ${ATREX_COMMIT:-unknown}" > "$OUT/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt"
python3 -m atrex calibrate 2>&1 | tee "$OUT/calibrate.log"
cp "$ATREX_CACHE_DIR"/calibration-*.json "$OUT/" 2>/dev/null
python3 -m atrex check examples/kernels --quiet --json "$OUT/examples-h200.json" \
  --markdown "$OUT/examples-h200.md" --plot "$OUT/examples-h200.png"
ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:rmsnorm \
  --log-file "$OUT/ncu.csv" python3 benchmarks/ncu_vs_atrex.py driver examples/kernels/rmsnorm \
  prefill-8192 20 >/dev/null 2>&1
python3 benchmarks/ncu_vs_atrex.py compare "$OUT/ncu.csv" "$OUT/examples-h200.json" rmsnorm \
  prefill-8192 "$OUT/ncu-vs-atrex-h200.json"
