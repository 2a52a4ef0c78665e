"""The two decode attention kernels' schedules under the Triton interpreter, against the float64
reference, at lengths and program counts the suite's CPU shapes do not reach: more programs than
tiles (empty ranges), one sequence over every program, many short sequences in one range,
lengths of one token and of exact page multiples, several kv heads per program, cache slots no
sequence owns holding NaN. The balanced
schedule's bookkeeping (which program holds which piece, in which slot) is integer arithmetic
that the GPU runs the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "benchmarks" / "suite"

SCRIPT = r"""
import importlib.util, json, math, sys
import torch

def load(name):
    spec = importlib.util.spec_from_file_location(name, f"{sys.argv[1]}/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

kernel, reference = load("kernel"), load("reference")
mla = hasattr(kernel, "mla_paged_decode")
torch.manual_seed(0)
errors = []
for schedule, tma, lens, programs, q_heads, kv_heads, per_program in json.loads(sys.argv[2]):
    kernel.SCHEDULE = schedule
    kernel.TMA_PAGES = tma  # GQA only
    kernel._balanced_programs = lambda device, p=programs: p
    kernel._balanced_ranges = lambda device, columns, p=programs: p
    page, dim = 16, 64
    pages = [math.ceil(n / page) for n in lens]
    pool = sum(pages) + 3
    perm = torch.randperm(pool)
    table = torch.zeros(len(lens), max(pages) + 1, dtype=torch.int32)  # padded with page 0
    start = 0
    for row, count in enumerate(pages):
        table[row, :count] = perm[start:start + count].int()
        start += count
    common = {"block_table": table, "seq_lens": torch.tensor(lens, dtype=torch.int32)}
    # slots no sequence owns hold NaN: a kernel must not let them into any output
    owned = torch.zeros(pool * page, dtype=torch.bool)
    for row, n in enumerate(lens):
        tokens = torch.arange(n)
        owned[table[row, tokens // page].long() * page + tokens % page] = True
    if mla:  # latent 64 + rope 16, all heads share the latent rows
        cache = torch.randn(pool * page, dim + 16)
        cache[~owned] = float("nan")
        inputs = {"q": (0.5 * torch.randn(len(lens), q_heads, dim + 16)).bfloat16(),
                  "kv_cache": cache.reshape(pool, page, dim + 16).bfloat16(), **common}
        models = reference.Model(kv_lora_rank=dim), kernel.Model(kv_lora_rank=dim)
    else:
        kernel.KV_HEADS_PER_PROGRAM = per_program
        caches = [torch.randn(pool * page, kv_heads, dim) for _ in range(2)]
        for cache in caches:
            cache[~owned] = float("nan")
        k_cache, v_cache = (c.reshape(pool, page, kv_heads, dim).bfloat16() for c in caches)
        inputs = {"q": torch.randn(len(lens), q_heads, dim).bfloat16(), "k_cache": k_cache,
                  "v_cache": v_cache, **common}
        models = reference.Model(), kernel.Model()
    exact = models[0](**{k: v.double() if v.is_floating_point() else v
                         for k, v in inputs.items()})
    errors.append((models[1](**inputs).double() - exact).abs().max().item())
print(json.dumps(errors))
"""

RAGGED = [5, 3, 200, 33, 64, 65, 7, 130, 2]
# (lengths, programs or tile ranges, query heads, kv heads, kv heads per program)
CASES = [([1, 70, 150], 5, 6, 2, 1), ([1, 70, 150], 40, 8, 2, 1), ([1, 70, 150], 1, 8, 2, 1),
         ([300], 7, 16, 4, 1), (RAGGED, 4, 16, 4, 2), (RAGGED, 13, 6, 2, 1),
         ([16] * 6, 6, 8, 8, 1), ([17, 15], 3, 16, 4, 4)]


@pytest.mark.slow
@pytest.mark.parametrize("op,tma", [("mla_paged_decode", False), ("paged_decode_gqa", False),
                                    ("paged_decode_gqa", True)])
@pytest.mark.parametrize("schedule", ["splits", "balanced"])
def test_each_schedule_matches_the_reference_at_ragged_lengths(op, tma, schedule):
    """GQA with TMA: pages through tensor descriptors (the slots past a sequence's end hold
    whatever the cache holds there)."""
    cases = [(schedule, tma, *case) for case in CASES]
    if op == "mla_paged_decode":  # 16 query heads read one latent row per token
        cases = [(schedule, tma, lens, p, 16, 1, 1) for _, _, lens, p, *_ in cases]
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(SUITE / op), json.dumps(cases)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    errors = json.loads(run.stdout.strip().splitlines()[-1])
    # bf16 outputs: half an ulp of values up to ~4 is 1.6e-2
    assert all(e < 2e-2 for e in errors), list(zip(cases, errors, strict=True))
