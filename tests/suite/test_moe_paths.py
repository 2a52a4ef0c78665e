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

from .op_script import LOAD_OP_FILES, last_json

ROOT = Path(__file__).resolve().parents[2]
OP = ROOT / "benchmarks" / "suite" / "fused_moe"

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


def _rows(script: str, *args: str) -> list:
    """The JSON list a script prints last, run under the interpreter from the repository root."""
    return last_json(script, *args)


@pytest.mark.slow
def test_persistent_programs_walking_many_tiles_give_the_reference_answer():
    grid = {"PERSISTENT": [True], "PROGRAMS_PER_SM": [0.02], "TMA_WEIGHTS": [False, True],
            "BLOCKED_ACT": [False, True], "BLOCKED_X": [False, True]}
    rows = _rows(SCRIPT, json.dumps(grid))
    assert len(rows) == 3
    for row in rows:
        assert len(row["variants"]) == 8
        for entry in row["variants"]:
            assert entry.get("error") is None and entry["mismatch"] is None, (row["shape"], entry)


ALIGN_SCRIPT = LOAD_OP_FILES + r"""
import json
import torch

kernel = load("kernel")


def check(ids, num_experts, block_m):
    al = kernel.moe_align(ids, num_experts, block_m)
    sorted_ids, block_expert, max_blocks = al.sorted_ids, al.block_expert, al.max_blocks
    n_pairs = ids.numel()
    flat = ids.reshape(-1).long()
    in_run = (flat >= 0) & (flat < num_experts)
    flat = flat[in_run]
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    starts = torch.cumsum(padded, 0) - padded
    assert sorted_ids.shape == (max_blocks * block_m,) and block_expert.shape == (max_blocks,)
    assert int(al.counts[0]) == int(padded.sum()) <= max_blocks * block_m
    assert int(al.counts[1]) * block_m == int(padded.sum())
    for e in range(num_experts):
        s, c, p = int(starts[e]), int(counts[e]), int(padded[e])
        pairs = sorted_ids[s:s + c].long().sort().values
        assert torch.equal(pairs, torch.nonzero(in_run)[flat == e].reshape(-1)), e
        assert bool((sorted_ids[s + c:s + p] == n_pairs).all()), e
        assert bool((block_expert[s // block_m:(s + p) // block_m] == e).all()), e
    return {"pairs": n_pairs, "experts": num_experts, "block_m": block_m,
            "used": int((counts > 0).sum()), "align": [kernel.ALIGN_BLOCK, kernel.ALIGN_PROGRAMS]}


torch.manual_seed(0)
for align_block, programs in ((1024, 128), (32, 128), (32, 3)):
    kernel.ALIGN_BLOCK, kernel.ALIGN_PROGRAMS = align_block, programs
    for tokens, num_experts, top_k, block_m in ((11, 6, 2, 16), (70, 4, 2, 128), (77, 16, 3, 16),
                                                (300, 128, 8, 16), (450, 8, 2, 128)):
        routed = torch.stack([torch.randperm(num_experts)[:top_k] for _ in range(tokens)])
        cases = {
            "random": routed,
            "one expert": torch.full((tokens, top_k), num_experts - 1),
            "even experts only": routed // 2 * 2,
            "int64 ids, two experts": torch.randint(0, 2, (tokens, top_k)) * (num_experts - 1),
            "ids outside the experts": torch.where(torch.rand(tokens, top_k) < 0.2,
                                                   torch.tensor(num_experts), routed),
        }
        for name, ids in cases.items():
            dtype = torch.int64 if "int64" in name else torch.int32
            print(json.dumps({"case": name, **check(ids.to(dtype), num_experts, block_m)}))
"""


@pytest.mark.slow
def test_moe_align_lays_out_every_pair_once_per_expert_run():
    """moe_align against the contract the GEMMs read: expert e's pairs (any order) from e's padded
    start, padding ids (n_pairs) to the run's BLOCK_M-aligned end, e in block_expert for each of
    its blocks, the padded total; a pair whose id is outside the experts in no run; with one
    program, many programs (n_pairs well past two of ALIGN_BLOCK) and few programs walking
    several ALIGN_BLOCK steps each."""
    run = subprocess.run([sys.executable, "-c", ALIGN_SCRIPT, str(OP)], capture_output=True,
                         text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    assert len(rows) == 3 * 5 * 5
    assert {row["block_m"] for row in rows} == {16, 128}
    assert any(row["used"] < row["experts"] for row in rows if row["case"] == "even experts only")
    assert max(row["pairs"] for row in rows) > 2 * 1024


OUTSIDE_SCRIPT = LOAD_OP_FILES + r"""
import json
import torch

kernel, reference = load("kernel"), load("reference")
torch.manual_seed(0)
rows = []
for tokens, num_experts in ((70, 4), (11, 6)):  # prefill tiles (64-row blocks), decode tiles
    x = torch.randn(tokens, 96).to(torch.bfloat16)
    w1 = (torch.randn(num_experts, 160, 96) * 96 ** -0.5).to(torch.bfloat16)
    w2 = (torch.randn(num_experts, 96, 80) * 80 ** -0.5).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(num_experts)[:2] for _ in range(tokens)]).to(torch.int32)
    ids[::3, 1] = -1  # expert parallelism's mark for an expert on another rank
    ids[1::5, 0] = num_experts
    weights = torch.rand(tokens, 2)
    want = reference.Model()(x, w1, w2, weights, ids).float()
    got = kernel.fused_moe(x, w1, w2, weights, ids).float()
    rows.append({"tokens": tokens, "max_err": float((got - want).abs().max()),
                 "scale": float(want.abs().max())})
print(json.dumps(rows))
"""


@pytest.mark.slow
def test_pairs_routed_outside_the_experts_add_nothing():
    """A pair whose expert id is outside [0, E) (-1 marks a remote expert under expert
    parallelism) adds nothing to its token's output, as in the reference, with the prefill
    tiles and the decode tiles."""
    rows = _rows(OUTSIDE_SCRIPT, str(OP))
    assert len(rows) == 2
    for row in rows:
        assert row["max_err"] <= 0.02 * row["scale"] + 0.01, row


FP8_OUTSIDE_SCRIPT = r"""
import json, sys
sys.path.insert(0, "benchmarks")
import torch
from launch_sweep import Op, shapes_of
from atrex.runner.executor.devmap import CudaToCpu

CudaToCpu().__enter__()
op = Op("fp8_fused_moe")
rows = []
for sid, shape in shapes_of("fp8_fused_moe", "cpu").items():
    torch.manual_seed(0)
    inputs = op.draw(shape)
    ids = inputs["topk_ids"]
    ids[::3, -1] = -1  # expert parallelism's mark for an expert on another rank
    ids[1::5, 0] = inputs["w1"].shape[0]
    want = op.model(op.reference, shape)(**inputs).float()
    got = op.model(op.kernel, shape)(**inputs).float()
    rows.append({"shape": sid, "max_err": float((got - want).abs().max()),
                 "scale": float(want.abs().max())})
print(json.dumps(rows))
"""


@pytest.mark.slow
def test_fp8_pairs_routed_outside_the_experts_add_nothing():
    """The same for the FP8 MoE at its CPU shapes (its tolerance: one FP8 step of the
    re-quantized intermediate, atol 0.1 in the suite's atrex.toml)."""
    rows = _rows(FP8_OUTSIDE_SCRIPT)
    assert len(rows) == 3
    for row in rows:
        assert row["max_err"] <= 0.03 * row["scale"] + 0.1, row
