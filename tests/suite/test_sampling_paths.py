"""The sampling kernel's paths that the suite's CPU shapes do not single out, under the Triton
interpreter against the sorted-cumsum reference: the candidates written by the statistics pass
(FUSED_WRITE) serve a row without the compaction kernel; a chunk whose low region overflows sends
its row back to the compaction; rows without a filter are drawn by the two-level scan
(NOFILTER_COARSE) across many blocks of a chunk. A path's use is shown by launching everything
but the compaction: the rows it serves stay right, the others do not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OP = ROOT / "benchmarks" / "suite" / "top_k_top_p_sampling"

SCRIPT = r"""
import importlib.util, json, sys
import torch
from runner.executor.devmap import CudaToCpu

def load(name):
    spec = importlib.util.spec_from_file_location(name, f"{sys.argv[1]}/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

kernel, reference, inputs = load("kernel"), load("reference"), load("input")
launch_compaction = kernel._compact_kernel

class NoLaunch:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None

results = []
defaults = {}  # each case starts from the module's own constants
for case in json.loads(sys.argv[2]):
    torch.manual_seed(case["seed"])
    with CudaToCpu():
        d = inputs._make_inputs(**case["input"])
    vocab = d["probs"].shape[1]
    if case["rows"] == "filtered":  # no row left without a filter (those skip the compaction)
        d["top_p"] = torch.where(d["top_k"] >= vocab, torch.full_like(d["top_p"], 0.9),
                                 d["top_p"])
    elif case["rows"] == "unfiltered":
        d["top_k"] = torch.full_like(d["top_k"], vocab)
        d["top_p"] = torch.ones_like(d["top_p"])
        d["uniform"][:3] = torch.tensor([0.0, 1.0 - 2.0 ** -24, 0.5])
    for name, value in defaults.items():
        setattr(kernel, name, value)
    for name, value in case["constants"].items():
        defaults.setdefault(name, getattr(kernel, name))
        setattr(kernel, name, value)
    kernel._compact_kernel = NoLaunch() if case["skip_compaction"] else launch_compaction
    got = kernel.Model()(**d)
    want = reference.Model()(**d)
    results.append((got != want).nonzero().flatten().tolist())
print(json.dumps(results))
"""

MID = {"batch": 12, "vocab": 40000}  # chunks of 3072: several blocks and coarse blocks each
FUSED = {"FUSED_WRITE": True}


def _wrong_rows(cases: list[dict]) -> list[list[int]]:
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(OP), json.dumps(cases)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _case(constants: dict, skip_compaction: bool, rows: str = "filtered",
          shape: dict = MID, seed: int = 3) -> dict:
    return {"constants": constants, "skip_compaction": skip_compaction, "rows": rows,
            "input": shape, "seed": seed}


@pytest.mark.slow
def test_the_statistics_pass_candidates_serve_rows_without_the_compaction():
    off = {"FUSED_WRITE": False}
    served, unserved, ties = _wrong_rows([
        _case(FUSED, skip_compaction=True),
        _case(off, skip_compaction=True),
        _case(FUSED, skip_compaction=False, rows="mixed",
              shape={"batch": 16, "vocab": 2000, "tie_rows": True}),
    ])
    assert served == []
    assert unserved, "without the fused path every filtered row needs the compaction"
    assert ties == []  # equal probabilities at the cuts, each row on whichever path it takes


@pytest.mark.slow
def test_an_overflowing_low_region_sends_its_row_back_to_the_compaction():
    tiny = {"FUSED_WRITE": True, "LO_CAP": 1}
    compacted, skipped = _wrong_rows([_case(tiny, skip_compaction=False),
                                      _case(tiny, skip_compaction=True)])
    assert compacted == []
    assert skipped, "with one low slot per chunk some row must have been compacted"


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True])
def test_rows_without_a_filter_are_drawn_by_the_two_level_scan(fused):
    constants = {"FUSED_WRITE": fused, "NOFILTER_COARSE": 256}
    one_level = {**constants, "NOFILTER_COARSE": 0}
    assert _wrong_rows([_case(constants, False, rows="unfiltered"),
                        _case(one_level, False, rows="unfiltered"),
                        _case(constants, False, rows="mixed", seed=5)]) == [[], [], []]
