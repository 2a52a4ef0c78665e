#!/usr/bin/env bash
# Weights for benchmarks/suite/ from a real profiler trace (issue 17), on the H200.
#
# 1. benchmarks/llama_trace.py builds a Llama-architecture model from a transformers LlamaConfig
#    (Llama-3.1-8B layer dimensions, LAYERS decoder layers, random bf16 weights: nothing is
#    downloaded), prefills BATCH prompts of PROMPT tokens and profiles STEPS decode steps with
#    torch.profiler (record_shapes, with_stack), each followed by top-k/top-p sampling.
# 2. `atrex weights` attributes the trace's GPU kernel time to the suite's operators through
#    benchmarks/llama_weights.toml and writes call_count / total_duration_us per shape and
#    importance_score per operator into a copy of the suite's metadata.json files.
#
#   device: OUT=$OUT bash benchmarks/weights_h200.sh        (one device command, a few minutes)
#   here:   copy $OUT/{llama_trace.json,weights.json,weights.txt,metadata/} to
#           benchmarks/results/h200-weights/
#
# DEVICE=cpu TINY=1 runs the same sequence on a CPU with a tiny config (the path, not the numbers).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/weights-h200}
DEVICE=${DEVICE:-cuda}
LAYERS=${LAYERS:-2}
BATCH=${BATCH:-64}
PROMPT=${PROMPT:-512}
STEPS=${STEPS:-8}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 ATREX_CACHE_DIR=${ATREX_CACHE_DIR:-/tmp/atrex-cache}

tiny=()
if [ "${TINY:-0}" = 1 ]; then tiny=(--tiny); fi
if [ "$DEVICE" = cuda ]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv \
    > "$OUT/nvidia-smi.txt" 2>&1 || true
fi
echo "commit: ${ATREX_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}" > "$OUT/commit.txt"

"$PYTHON" benchmarks/llama_trace.py --out "$OUT" --device "$DEVICE" "${tiny[@]}" \
  --layers "$LAYERS" --batch "$BATCH" --prompt "$PROMPT" --steps "$STEPS" \
  2> "$OUT/llama_trace.log"

# The weights go into a copy: the committed suite changes only when a person reviews the diff.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cp -r benchmarks/suite "$WORK/suite"
"$PYTHON" -m atrex weights "$OUT/llama_decode_trace.json.gz" --map benchmarks/llama_weights.toml \
  --repo "$WORK/suite" --json "$OUT/weights.json" --write > "$OUT/weights.txt" 2>&1
mkdir -p "$OUT/metadata"
for meta in "$WORK"/suite/*/metadata.json; do
  op=$(basename "$(dirname "$meta")")
  cp "$meta" "$OUT/metadata/$op.json"
done
sed '/^--- /,$d' "$OUT/weights.txt"  # the summary (the metadata diffs follow it in the file)
