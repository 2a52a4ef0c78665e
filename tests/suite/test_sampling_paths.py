"""The sampling kernel's paths that the suite's CPU shapes do not single out, under the Triton
interpreter against the sorted-cumsum reference: rows without a filter are drawn by the one chunk
program holding the target, across several blocks of its chunk (the uniform's extremes included),
and filtered rows are compacted from many chunks; every row whose top-k mass the buffer gives
exactly selected by bisection over the buffer instead of the sort (BISECT_ABOVE 0), ties at the
cuts included. Ties under the committed constants: the suite's cpu-ties shape
(tests/suite/test_suite_cpu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .op_script import LOAD_OP_FILES

ROOT = Path(__file__).resolve().parents[2]
OP = ROOT / "benchmarks" / "suite" / "top_k_top_p_sampling"

SCRIPT = LOAD_OP_FILES + r"""
import json
import torch
from runner.executor.devmap import CudaToCpu

kernel, reference, inputs = load("kernel"), load("reference"), load("input")
results = []
for case in json.loads(sys.argv[2]):
    torch.manual_seed(case["seed"])
    with CudaToCpu():
        d = inputs._make_inputs(**case["input"])
    vocab = d["probs"].shape[1]
    for name, value in case.get("constants", {}).items():
        setattr(kernel, name, value)
    if case["rows"] == "unfiltered":
        d["top_k"] = torch.full_like(d["top_k"], vocab)
        d["top_p"] = torch.ones_like(d["top_p"])
        d["uniform"][:3] = torch.tensor([0.0, 1.0 - 2.0 ** -24, 0.5])
    got = kernel.Model()(**d)
    want = reference.Model()(**d)
    results.append((got != want).nonzero().flatten().tolist())
print(json.dumps(results))
"""

# 20 chunks of 2048 (two 1024-wide blocks each) at the committed 8 chunk programs per SM, up to 32
MID = {"batch": 12, "vocab": 40000}


def _wrong_rows(cases: list[dict]) -> list[list[int]]:
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(OP), json.dumps(cases)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_unfiltered_and_filtered_rows_of_a_many_chunk_row_are_drawn_exactly():
    assert _wrong_rows([{"rows": "unfiltered", "input": MID, "seed": 3},
                        {"rows": "mixed", "input": MID, "seed": 5}]) == [[], []]


@pytest.mark.slow
def test_bisection_over_the_buffer_draws_what_the_sort_draws():
    every_row = {"BISECT_ABOVE": 0}
    cases = [{"rows": "mixed", "input": MID, "seed": 5, "constants": every_row},
             {"rows": "mixed", "input": {"batch": 16, "vocab": 2000, "tie_rows": True}, "seed": 1,
              "constants": every_row},
             {"rows": "mixed", "input": {"batch": 6, "vocab": 1000, "flat_rows": 1,
                                         "edge_rows": True}, "seed": 2, "constants": every_row}]
    assert _wrong_rows(cases) == [[], [], []]
