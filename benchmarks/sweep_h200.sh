#!/usr/bin/env bash
# A launch sweep on the H200 in one device call: SCRIPT (benchmarks/attention_h200.py, issue 13,
# by default; benchmarks/gemm_h200.py for issue 14; variants compiled by JOBS processes first),
# then Nsight Compute on each operator's kernels with the committed constants (SpeedOfLight,
# occupancy, warp states, memory workload), one CSV per operator, summarized in ncu-summary.md
# (benchmarks/ncu_summary.py). Everything lands in $OUT, beside nvidia-smi.txt and versions.txt;
# SWEEP_S bounds the sweep (it stops before an operator that would start later; SWEEP_KILL_S
# ends it, what was written stays), NCU_S each profile; NCU=0 or SWEEP=0 leaves a part out;
# DEVICE=cpu NCU=0 runs the sweep part on a machine without a GPU (its CPU checks only);
# SWEEP_ARGS passes more options (--retime EARLIER.json --top N: re-time earlier winners);
# NCU_CONTESTANTS="kb eager compile library" also profiles the reference's (eager, and through
# torch.compile) and the library peer's kernels (ncu-OP-eager.csv, ...) beside ours (ncu-OP.csv).
#   device: ATREX_COMMIT=<sha> [SCRIPT=benchmarks/gemm_h200.py OPS=gemm_prefill] \
#           bash benchmarks/sweep_h200.sh
set -u
OUT=${OUT:-out/attention-h200}
SCRIPT=${SCRIPT:-benchmarks/attention_h200.py}
OPS=${OPS:-mla_paged_decode,paged_decode_gqa,prefill_attention_gqa}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  > "$OUT/nvidia-smi.txt" 2>&1
. "$(dirname "$0")/versions.sh" && write_versions "$PYTHON" "$OUT/versions.txt"
if [ "${SWEEP:-1}" = 1 ]; then
  timeout "${SWEEP_KILL_S:-470}" "$PYTHON" "$SCRIPT" \
    "$OUT/$(basename "$SCRIPT" _h200.py)-sweep.json" --ops "$OPS" --device "${DEVICE:-cuda}" \
    --jobs "${JOBS:-12}" --max-seconds "${SWEEP_S:-420}" ${SWEEP_ARGS:-} > "$OUT/sweep.log" 2>&1
  echo "sweep rc $?" >> "$OUT/sweep.log"
fi
if [ "${NCU:-1}" = 1 ]; then
  profiled=()
  for op in ${OPS//,/ }; do
    for who in ${NCU_CONTESTANTS:-kb}; do
      name=$op; [ "$who" = kb ] || name=$op-$who
      timeout "${NCU_S:-60}" ncu --clock-control none --profile-from-start off \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section MemoryWorkloadAnalysis --section LaunchStats --csv --page details \
        "$PYTHON" "$SCRIPT" unused --ops "$op" --profile-once --profile-contestant "$who" \
        > "$OUT/ncu-$name.csv" 2> "$OUT/ncu-$name.err"
      rc=$?
      echo "ncu $name rc $rc" >> "$OUT/sweep.log"
      [ "$rc" = 0 ] && profiled+=("$OUT/ncu-$name.csv")
    done
  done
  # one Markdown row per profiled launch (the numbers the NOTES cite), over the profiles that
  # finished: one cut short by NCU_S has no table and would fail the summary of the others
  if [ "${#profiled[@]}" -gt 0 ]; then
    "$PYTHON" "$(dirname "$0")/ncu_summary.py" "${profiled[@]}" > "$OUT/ncu-summary.md" 2>&1
    echo "ncu summary rc $?" >> "$OUT/sweep.log"
  fi
fi
