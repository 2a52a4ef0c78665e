"""The bf16 fused MoE's persistent variant on the CPU with few programs, so that each walks many
(expert block, column tile) pairs through the flattened loop, with and without the tensor-
descriptor operands; checked by the GEMM sweep's own correctness filter against the reference at
every CPU shape. (The sweep's CPU run holds PROGRAMS_PER_SM at one program per SM, which gives
these shapes one tile a program.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
sys.path.insert(0, "benchmarks")
import launch_sweep
from launch_sweep import Op, Plan, shapes_of, sweep_shape
from atrex.runner.executor.devmap import CudaToCpu

CudaToCpu().__enter__()
op = Op("fused_moe")
plan = Plan(grids={"fused_moe": json.loads(sys.argv[1])}, graph=False)
rows = [sweep_shape(plan, op, sid, shape, quick=False, timer=None)
        for sid, shape in shapes_of("fused_moe", "cpu").items()]
print(json.dumps(rows))
"""


@pytest.mark.slow
def test_persistent_programs_walking_many_tiles_give_the_reference_answer():
    grid = {"PERSISTENT": [True], "PROGRAMS_PER_SM": [0.02], "TMA_WEIGHTS": [False, True],
            "BLOCKED_ACT": [False, True], "BLOCKED_X": [False, True]}
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(grid)], capture_output=True,
                         text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(rows) == 3
    for row in rows:
        assert len(row["variants"]) == 8
        for entry in row["variants"]:
            assert entry.get("error") is None and entry["mismatch"] is None, (row["shape"], entry)
