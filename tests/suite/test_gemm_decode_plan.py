"""gemm_decode's launch plan (tiles, deep mode, pipeline, K split) as a pure function, and the
balanced-tile (DEEP_BALANCE) deep path under the Triton
interpreter against a float64 product."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "benchmarks" / "suite" / "gemm_decode" / "kernel.py"


@pytest.fixture
def kernel():
    spec = importlib.util.spec_from_file_location("gemm_decode_kernel", KERNEL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_plan_is_deep_for_down_and_balanced_for_qkv(kernel):
    down = kernel._plan(64, 4096, 14336, 2, 132)
    assert (down.deep, down.block_n, down.block_k, down.stages, down.splits) == (
        True, 32, 128, 8, 1)
    qkv = kernel._plan(64, 6144, 4096, 2, 132)  # 128 programs of 48 columns on 132 SMs
    assert (qkv.deep, qkv.tile_n, qkv.n_tiles, qkv.splits) == (True, 48, 128, 1)


def test_without_balancing_qkv_takes_the_split_plan(kernel, monkeypatch):
    monkeypatch.setattr(kernel, "DEEP_BALANCE", False)
    qkv = kernel._plan(64, 6144, 4096, 2, 132)  # 192 programs of 32 columns on 132 SMs, unsplit
    assert (qkv.deep, qkv.block_n, qkv.n_tiles, qkv.stages, qkv.splits) == (
        False, 32, 192, kernel.NUM_STAGES, 1)


def test_the_stage_budget_cuts_only_widened_tiles(kernel, monkeypatch):
    qkv = kernel._plan(64, 6144, 4096, 2, 132)  # widened to a 64-column block
    assert (64 + 64) * 128 * 2 * qkv.stages <= kernel.DEEP_SMEM_BYTES
    # constants chosen by hand keep their stages
    monkeypatch.setattr(kernel, "DEEP_STAGES", 12)
    assert kernel._plan(64, 4096, 14336, 2, 132).stages == 12
    assert kernel._plan(64, 4096, 14336, 2, 132).block_n == 32  # down already fits at 32
    # a shape no width up to DEEP_MAX_BLOCK_N fits keeps the committed split-K tiles
    wide = kernel._plan(64, 65536, 4096, 2, 132)
    assert not wide.deep and wide.block_n == kernel.BLOCK_N


def test_balancing_gives_qkv_one_tile_per_sm_of_48_columns(kernel, monkeypatch):
    monkeypatch.setattr(kernel, "DEEP_BALANCE", True)
    qkv = kernel._plan(64, 6144, 4096, 2, 132)
    assert (qkv.deep, qkv.tile_n, qkv.block_n, qkv.n_tiles, qkv.splits) == (
        True, 48, 64, 128, 1)
    assert qkv.stages == 6  # [64 + 64, 128] bf16 stages in the 192 KB budget
    down = kernel._plan(64, 4096, 14336, 2, 132)  # fits at 32 columns: as committed
    assert (down.tile_n, down.block_n, down.n_tiles, down.stages) == (32, 32, 128, 8)
    monkeypatch.setattr(kernel, "DEEP_BALANCE", False)
    assert kernel._plan(64, 6144, 4096, 2, 132).tile_n == 32


PRODUCT = r"""
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("k", sys.argv[1])
kernel = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel)
setattr(kernel, sys.argv[2], True)
torch.manual_seed(0)
m, n, k = 3, 4300, 300  # 135 tiles of 32 columns: more than 132 SMs
plan = kernel._plan(m, n, k, 2, 132)
assert plan.deep and all(getattr(plan, f) == v for f, v in json.loads(sys.argv[3]).items()), plan
x = torch.randn(m, k).bfloat16()
w = torch.randn(n, k).bfloat16()
got = kernel.Model()(x, w).double()
want = x.double() @ w.double().T
err = ((got - want).abs() / (want.abs() + 1.0)).max().item()
assert err < 2e-2, err
print("ok", plan)
"""


def _product_under_the_interpreter(flag: str, plan: dict) -> None:
    """The kernel with `flag` on, at a shape where it changes the plan (the fields in `plan`),
    against a float64 product: a column computed twice or not at all would show."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", PRODUCT, str(KERNEL), flag, json.dumps(plan)],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")


def test_the_balanced_deep_path_computes_every_column_under_the_interpreter():
    # 33 columns a tile fit 132 SMs: tiles of 40 in 64-column blocks
    _product_under_the_interpreter("DEEP_BALANCE", {"tile_n": 40, "block_n": 64, "n_tiles": 108})
