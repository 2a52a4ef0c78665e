"""mla_paged_decode's 16-bit split partials (PARTIAL_DTYPE "fp16", a sweep variant) under the
Triton interpreter: as accurate against the float64 reference as the fp32 partials, and more
accurate than the bf16 reference itself (issue 13's accuracy rule). The numbers in the kernel's
NOTES.md come from this script at draws 0-5."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .op_script import LOAD_OP_FILES

ROOT = Path(__file__).resolve().parents[2]
OP = ROOT / "benchmarks" / "suite" / "mla_paged_decode"

SCRIPT = LOAD_OP_FILES + r"""
import json
import torch
from atrex.runner.executor.devmap import CudaToCpu

op = sys.argv[1]
kernel, reference, inputs = load("kernel"), load("reference"), load("input")
shape = json.load(open(f"{op}/shapes.json"))["cpu-edge"]
for seed in map(int, sys.argv[2:]):
    torch.manual_seed(seed)
    with CudaToCpu():
        x = inputs._make_inputs(**shape["input_kwargs"])
    wide = {k: (v.double() if v.is_floating_point() else v) for k, v in x.items()}
    oracle = reference.Model(**shape["init_kwargs"])(**wide).double()
    def rel_l2(out):
        return ((out.double() - oracle).norm() / oracle.norm()).item()
    errors = {"reference": rel_l2(reference.Model(**shape["init_kwargs"])(**x))}
    for dtype in ("fp32", "fp16"):
        kernel.PARTIAL_DTYPE = dtype
        errors[dtype] = rel_l2(kernel.Model(**shape["init_kwargs"])(**x))
    print(json.dumps({"seed": seed, **errors}))
"""


def test_fp16_partials_keep_the_fp32_accuracy():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(OP), "0", "1"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 2, result.stdout
    for line in lines:
        errors = json.loads(line)
        assert errors["fp16"] <= 1.05 * errors["fp32"], errors
        assert errors["fp16"] < errors["reference"], errors
