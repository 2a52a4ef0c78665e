#!/usr/bin/env bash
# One device call for issues 14/15 that makes use of whichever card comes: on an H200 the suite's
# rows of SUITE_OPS with every contestant (benchmarks/suite_h200.sh, which a later call resumes
# until it says "sequence finished"); on another card, or with FORCE_SWEEP=1, the sampling
# kernel's launch sweep from round GRIDS_FROM of benchmarks/small_ops_h200.py, then (NCU_TOO=1)
# ncu of its committed constants, packed as $OUT/callF.tgz.
#   device: ATREX_COMMIT=<sha> [FORCE_SWEEP=1] [GRIDS_FROM=-5] [NCU_TOO=0] \
#           bash benchmarks/suite_or_sampling_sweep.sh            (carry: [".whl"])
set -u
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $name"
export ATREX_COMMIT=${ATREX_COMMIT:?ATREX_COMMIT=<sha> names the results}
if echo "$name" | grep -q H200 && [ "${FORCE_SWEEP:-0}" != 1 ]; then
  export OPS=${SUITE_OPS:-"top_k_top_p_sampling gemm_decode"} BASELINES=eager,compile,library,kb
  export REPEAT_RUNS=0 WEIGHTS=0 SKIP_TESTS=1 WAIT_S=${WAIT_S:-530}
  OUT=$OUT bash benchmarks/suite_h200.sh
else
  sweep=/tmp/sampling-sweep
  rm -rf "$sweep" && mkdir -p "$sweep"
  OUT=$sweep SCRIPT=benchmarks/small_ops_h200.py OPS=top_k_top_p_sampling \
    SWEEP_ARGS="--grids-from ${GRIDS_FROM:--5}" SWEEP_S=${SWEEP_S:-300} \
    SWEEP_KILL_S=${SWEEP_KILL:-380} NCU=${NCU_TOO:-1} NCU_S=60 bash benchmarks/sweep_h200.sh
  tail -30 "$sweep/sweep.log"
  echo "$ATREX_COMMIT" > "$sweep/commit.txt"
  "${PYTHON:-python3}" -c "import platform, torch, triton; print(platform.python_version(), torch.__version__,
torch.version.cuda, triton.__version__)" > "$sweep/versions.txt" 2>&1
  tar czf "$OUT/callF.tgz" -C "$sweep" .
fi
