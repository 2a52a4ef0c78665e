#!/usr/bin/env bash
# The trusted-judge issue on the H200: the GPU tests, `atrex check examples/kernels`, the
# adversarial corpus. Usage: OUT=<dir> ATREX_COMMIT=<sha> bash benchmarks/judge_h200.sh [CASE...]
# (with case names, a smoke run: examples rmsnorm and those corpus cases only).
set -u
OUT=${OUT:-out/h200}
mkdir -p "$OUT"
export ATREX_CACHE_DIR=/tmp/atrex-cache PYTHONUNBUFFERED=1
echo "commit: ${ATREX_COMMIT:-unknown}" > "$OUT/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt"
if [ $# -gt 0 ]; then
  python3 -m atrex check examples/kernels --op rmsnorm --device cuda --quiet \
    --json "$OUT/examples-rmsnorm-h200.json" 2>&1 | tail -5
  python3 benchmarks/adversarial_gpu.py "$OUT/adversarial-smoke-h200.json" "$@" 2>&1 | tail -20
  exit 0
fi
python3 -m pytest -q -m gpu tests/runner/test_gpu.py 2>&1 | tee "$OUT/gpu-tests.log" | tail -5
python3 -m atrex check examples/kernels --device cuda --quiet --json "$OUT/examples-h200.json" \
  --markdown "$OUT/examples-h200.md" 2>&1 | tail -5
python3 benchmarks/adversarial_gpu.py "$OUT/adversarial-h200.json" 2>&1 | tail -60
