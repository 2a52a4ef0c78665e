"""gemm_decode's launch plan (tiles, deep mode, pipeline, K split) as a pure function, and the
balanced-tile (DEEP_BALANCE) and split deep-tile (DEEP_SPLIT) paths under the Triton
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
for name, value in json.loads(sys.argv[2]).items():
    setattr(kernel, name, value)
torch.manual_seed(0)
m, n, k = json.loads(sys.argv[4])
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


def _product_under_the_interpreter(constants: dict, shape: tuple, plan: dict) -> None:
    """The kernel with `constants` set, at an [m, n, k] shape where they change the plan (the
    fields in `plan`), against a float64 product: a column computed twice or not at all, or a
    K range summed twice or not at all, would show."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    args = [json.dumps(constants), json.dumps(plan), json.dumps(shape)]
    result = subprocess.run([sys.executable, "-c", PRODUCT, str(KERNEL), *args],
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ok")


def test_the_balanced_deep_path_computes_every_column_under_the_interpreter():
    # 135 tiles of 32 columns are more than 132 SMs; 33 columns a tile fit: tiles of 40 in
    # 64-column blocks
    _product_under_the_interpreter({"DEEP_BALANCE": True}, (3, 4300, 300),
                                   {"tile_n": 40, "block_n": 64, "n_tiles": 108})


def test_split_deep_tiles_widen_and_split_k(kernel, monkeypatch):
    monkeypatch.setattr(kernel, "DEEP_SPLIT", 2)
    qkv = kernel._plan(64, 6144, 4096, 2, 132)  # 64 tiles of 96 columns, two K halves
    assert (qkv.deep, qkv.tile_n, qkv.block_n, qkv.n_tiles, qkv.splits, qkv.per_split) == (
        True, 96, 128, 64, 2, 16)
    assert qkv.stages == 4  # [64 + 128, 128] bf16 stages in the 192 KB budget
    down = kernel._plan(64, 4096, 14336, 2, 132)  # 64 tiles of 64 columns, two K halves
    assert (down.tile_n, down.block_n, down.n_tiles, down.splits, down.stages) == (
        64, 64, 64, 2, 6)
    monkeypatch.setattr(kernel, "DEEP_SPLIT", 4)
    down = kernel._plan(64, 4096, 14336, 2, 132)  # 32 tiles of 128, four K quarters
    assert (down.tile_n, down.n_tiles, down.splits) == (128, 32, 4)
    # qkv's four-way tiles would be 192 columns, past DEEP_MAX_BLOCK_N: the split-K plan
    qkv = kernel._plan(64, 6144, 4096, 2, 132)
    assert (qkv.deep, qkv.block_n) == (False, kernel.BLOCK_N)


def test_split_deep_tiles_compute_every_column_and_k_range_under_the_interpreter():
    # 72 columns a tile, 60 tiles in 128-column blocks; K 1100 is 9 blocks of 128, split 5 + 4
    # with the last block ragged
    _product_under_the_interpreter({"DEEP_SPLIT": 2}, (3, 4300, 1100),
                                   {"tile_n": 72, "block_n": 128, "n_tiles": 60, "splits": 2})
