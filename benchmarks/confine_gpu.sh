#!/usr/bin/env bash
# The executor's confinement (runner/executor/confine.py) on a GPU: the GPU tests with the
# confinement probe on CUDA, `atrex check examples/kernels --device cuda` while a watcher keeps
# every executor's "confined (Landlock ABI N)" line and any permission error from executor.log,
# then the adversarial corpus (resumable, cut at CORPUS_S seconds).
#   device: OUT=<dir> ATREX_COMMIT=<sha> bash benchmarks/confine_gpu.sh
set -u
OUT=${OUT:?OUT=<dir> receives the results}
mkdir -p "$OUT"
export ATREX_CACHE_DIR=/tmp/atrex-cache PYTHONUNBUFFERED=1
echo "commit: ${ATREX_COMMIT:-unknown}" > "$OUT/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt"
. "$(dirname "$0")/versions.sh" && write_versions python3 "$OUT/versions.txt"
python3 -c "import ctypes; from atrex.runner.executor.confine import landlock_abi
print('landlock ABI', landlock_abi(ctypes.CDLL(None, use_errno=True)))" >> "$OUT/versions.txt" 2>&1

watch_executor_logs() {  # executor scratch directories vanish with their run: poll them
  while true; do
    find /tmp -name executor.log -path '*atrex-*' 2>/dev/null | while read -r log; do
      grep -hE "atrex executor|Permission denied|PermissionError|Operation not permitted" "$log"
    done >> "$OUT/executor-lines.raw" 2>/dev/null
    sleep 0.5
  done
}
watch_executor_logs &
watcher=$!

( time python3 -m pytest -q -o addopts="" -p no:cacheprovider -m gpu --durations=20 \
    tests/runner/test_confinement.py tests/runner/test_gpu.py ) > "$OUT/gpu-tests.log" 2>&1
tail -6 "$OUT/gpu-tests.log"
( time python3 -m atrex check examples/kernels --device cuda --quiet \
    --json "$OUT/examples.json" --markdown "$OUT/examples.md" ) > "$OUT/examples.log" 2>&1
echo "atrex check rc: $?"; tail -8 "$OUT/examples.log"
kill "$watcher" 2>/dev/null
# a log is read on every poll while it exists: the counts are sightings, not executors
sort "$OUT/executor-lines.raw" 2>/dev/null | uniq -c > "$OUT/executor-lines.txt"
rm -f "$OUT/executor-lines.raw"
cat "$OUT/executor-lines.txt"
timeout "${CORPUS_S:-240}" python3 benchmarks/adversarial_gpu.py "$OUT/adversarial.json" \
  > "$OUT/adversarial.log" 2>&1
echo "corpus rc: $?"; tail -15 "$OUT/adversarial.log"
