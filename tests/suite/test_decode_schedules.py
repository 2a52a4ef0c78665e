"""The MLA decode kernel's two schedules under the Triton interpreter, against the float64
reference, at lengths and program counts the suite's CPU shape does not reach: more programs
than tiles (empty ranges), one sequence over every program, many short sequences in one range,
lengths of one token and of exact page multiples. The balanced schedule's bookkeeping (which
program holds which piece, in which slot) is all integer arithmetic that the GPU runs the same
way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OP = ROOT / "benchmarks" / "suite" / "mla_paged_decode"

SCRIPT = r"""
import importlib.util, json, math, sys
import torch

def load(name):
    spec = importlib.util.spec_from_file_location(name, f"{sys.argv[1]}/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

kernel, reference = load("kernel"), load("reference")
torch.manual_seed(0)
cases = json.loads(sys.argv[2])
errors = []
for schedule, lens, programs in cases:
    kernel.SCHEDULE = schedule
    kernel._balanced_programs = lambda device, p=programs: p
    page, latent, rope = 16, 64, 16
    pages = [math.ceil(n / page) for n in lens]
    pool = sum(pages) + 3
    perm = torch.randperm(pool)
    table = torch.zeros(len(lens), max(pages) + 1, dtype=torch.int32)  # padded with page 0
    start = 0
    for row, count in enumerate(pages):
        table[row, :count] = perm[start:start + count].int()
        start += count
    inputs = {"q": (0.5 * torch.randn(len(lens), 16, latent + rope)).bfloat16(),
              "kv_cache": torch.randn(pool, page, latent + rope).bfloat16(),
              "block_table": table, "seq_lens": torch.tensor(lens, dtype=torch.int32)}
    exact = reference.Model(kv_lora_rank=latent)(
        **{k: v.double() if v.is_floating_point() else v for k, v in inputs.items()})
    got = kernel.Model(kv_lora_rank=latent)(**inputs).double()
    errors.append((got - exact).abs().max().item())
print(json.dumps(errors))
"""

LENGTHS = [[1, 70, 150], [300], [5, 3, 200, 33, 64, 65, 7, 130, 2], [16] * 6, [17, 15]]


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["splits", "balanced"])
def test_both_schedules_match_the_reference_at_ragged_lengths(schedule):
    programs = [5, 7, 4, 6, 3] if schedule == "balanced" else [1] * len(LENGTHS)
    cases = [(schedule, lens, p) for lens, p in zip(LENGTHS, programs, strict=True)]
    if schedule == "balanced":
        cases += [(schedule, [1, 70, 150], 40), (schedule, [1, 70, 150], 1),
                  (schedule, [5, 3, 200, 33, 64, 65, 7, 130, 2], 13)]
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(OP), json.dumps(cases)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    errors = json.loads(run.stdout.strip().splitlines()[-1])
    # bf16 output: half an ulp of values up to ~4 is 1.6e-2
    assert all(e < 2e-2 for e in errors), list(zip(cases, errors, strict=True))
