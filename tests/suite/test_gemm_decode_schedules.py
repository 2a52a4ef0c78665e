"""The decode GEMM's stream-K schedule under the Triton interpreter, against float64, with so few
programs that shares cut tiles anywhere: several programs per tile, several tiles per program,
two row tiles (M > 64), and M, N, K not multiples of the tiles. (The sweep's CPU run gives the
CPU shapes one unit a program, which cuts nothing.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib.util, itertools, json, sys
import torch

spec = importlib.util.spec_from_file_location("k", "benchmarks/suite/gemm_decode/kernel.py")
kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)
kernel.SCHEDULE = "stream_k"
torch.manual_seed(0)
worst = 0.0
shapes = [(5, 200, 300), (64, 96, 512), (70, 100, 200), (1, 40, 64)]
for (m, n, k), block_n, block_k, programs_per_sm in itertools.product(
        shapes, [32, 64], [64, 128], [0.01, 0.03, 0.05, 1]):
    kernel.BLOCK_N, kernel.BLOCK_K, kernel.PROGRAMS_PER_SM = block_n, block_k, programs_per_sm
    x, w = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16()
    exact = x.double() @ w.double().T
    got = kernel.skinny_matmul(x, w).double()
    worst = max(worst, ((got - exact).abs() / (exact.abs() + 1)).max().item())
print(json.dumps(worst))
"""


@pytest.mark.slow
def test_stream_k_shares_cut_anywhere_give_the_product():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    # bf16 output of an fp32 sum: one bf16 rounding (2^-8 relative) plus accumulation order
    assert json.loads(run.stdout) < 1e-2
