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

from .op_script import LOAD_OP_FILES, last_json

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
    return last_json(SCRIPT, str(OP), json.dumps(cases))


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


@pytest.mark.slow
def test_six_thresholds_and_the_ordered_compaction_draw_what_the_sort_draws():
    """The configuration before the H100 sweep at b3823ce, still a choice of constants: six
    thresholds 2^-8 ... 2^-18 (statistics accumulated block-first, 256 a step; the select's
    pairwise steps broadcast as vectors) and every row compacted in token-id order by prefix sums
    (the committed kernel does that for rows of more than SMALL candidates only); ties, edge
    rows, the full-row fallback and rows of thousands of candidates included."""
    before = {"NUM_THRESH": 6, "THRESH_TOP": 8, "THRESH_STEP": 2, "COMPACT_ATOMIC": False,
              "SKIP_EMPTY_CHUNKS": False, "STATS_THRESH_FIRST": False, "STATS_BLOCK": 256,
              "SELECT_BCAST": False}
    cases = [{"rows": "mixed", "input": MID, "seed": 5, "constants": before},
             {"rows": "mixed", "input": {"batch": 16, "vocab": 2000, "tie_rows": True}, "seed": 1,
              "constants": before},
             {"rows": "mixed", "input": {"batch": 6, "vocab": 1000, "flat_rows": 1,
                                         "edge_rows": True}, "seed": 2, "constants": before},
             {"rows": "mixed", "input": {"batch": 6, "vocab": 6000, "wide_rows": 2}, "seed": 4,
              "constants": before}]
    assert _wrong_rows(cases) == [[]] * len(cases)


@pytest.mark.slow
def test_compaction_with_and_without_the_empty_block_guard_draws_what_the_sort_draws():
    """COMPACT_GUARD (committed on) and off, so both stay a choice of constants."""
    cases = [{"rows": "mixed", "input": MID, "seed": 5, "constants": {"COMPACT_GUARD": guard}}
             for guard in (True, False)]
    cases.append({"rows": "mixed", "input": {"batch": 16, "vocab": 2000, "tie_rows": True},
                  "seed": 1, "constants": {"COMPACT_GUARD": True}})
    assert _wrong_rows(cases) == [[]] * len(cases)


STATS = LOAD_OP_FILES + r"""
import json
import torch
from runner.executor.devmap import CudaToCpu

kernel, inputs = load("kernel"), load("input")
torch.manual_seed(7)
with CudaToCpu():
    probs = inputs._make_inputs(batch=14, vocab=5000, tie_rows=True)["probs"]
batch, vocab = probs.shape
chunk, n_chunks = 1536, 4  # the last chunk ragged (488), a 512-wide block's pair half-masked
p = torch.nn.functional.pad(probs, (0, chunk * n_chunks - vocab)).view(batch, n_chunks, chunk)
failures = []
for case in json.loads(sys.argv[2]):
    kernel.NUM_THRESH = case.pop("NUM_THRESH", 4)
    th = kernel._threshold_constants()
    cnt, mass, _, _, tot, fill = kernel._workspace(batch, n_chunks, th["THRESH_PAD"], "cpu")
    kernel._stats_kernel[(batch, n_chunks)](
        probs, cnt, mass, tot, fill, vocab, chunk, probs.stride(0), n_chunks, **th, **case,
        USE_PDL=False)
    j = torch.arange(th["THRESH_PAD"])
    t = torch.where(j < th["NUM_THRESH"], 2.0 ** -(th["TOP"] + th["STEP"] * j), 2.0)
    ge = p[..., None] >= t
    want = (ge.sum(2), (p[..., None] * ge).sum(2), p.sum(2))
    if not (torch.equal(cnt, want[0].int()) and torch.equal(mass, want[1])
            and torch.equal(tot, want[2])):
        failures.append(case)
print(json.dumps(failures))
"""


@pytest.mark.slow
def test_statistics_pass_counts_every_layout_exactly():
    """The statistics pass's per-chunk counts, masses and totals from the 2-D tiles (either axis
    first), with paired and single loads, a padding threshold and many short steps, against torch
    on ragged chunks (exact: multiples of 2^-24 summing to <= 1)."""
    cases = [{"THRESH_FIRST": first, "BLOCK": 512, "PAIR": pair, "NUM_THRESH": n}
             for first in (True, False) for pair in (True, False) for n in (4, 3)]
    cases.append({"THRESH_FIRST": True, "BLOCK": 64, "PAIR": False,
                  "NUM_THRESH": 4})  # 24 steps a chunk, the last one ragged
    assert last_json(STATS, str(OP), json.dumps(cases)) == []


@pytest.mark.slow
def test_pairwise_select_at_the_tiny_size_draws_what_the_sort_draws():
    """SELECT_TINY: rows of few candidates ranked in smaller tiles, the others at SMALL; at 16
    both sizes take rows of the same draws (ties and wide rows included)."""
    cases = [{"rows": "mixed", "input": MID, "seed": seed, "constants": {"SELECT_TINY": tiny}}
             for seed, tiny in ((5, 64), (6, 16))]
    cases += [{"rows": "mixed", "input": {"batch": 16, "vocab": 2000, "tie_rows": True},
               "seed": 1, "constants": {"SELECT_TINY": 16}},
              {"rows": "mixed", "input": {"batch": 6, "vocab": 6000, "wide_rows": 2}, "seed": 4,
               "constants": {"SELECT_TINY": 64}}]
    assert _wrong_rows(cases) == [[]] * len(cases)


SHUFFLED = LOAD_OP_FILES + r"""
import json
import torch
import triton
import triton.language as tl
from runner.executor.devmap import CudaToCpu

kernel, inputs = load("kernel"), load("input")


@triton.jit
def _draw(buf_v, buf_i, n_ptr, k_ptr, p_ptr, u_ptr, tot_ptr, t_ptr, out_ptr, vocab,
          SIZE: tl.constexpr, ID_ORDER: tl.constexpr, BCAST: tl.constexpr):
    row = tl.program_id(0)
    token, ok = kernel._select_small(
        buf_v + row * SIZE, buf_i + row * SIZE, tl.load(n_ptr + row), tl.load(k_ptr + row),
        vocab, tl.load(p_ptr + row), tl.load(u_ptr + row), tl.load(tot_ptr + row),
        tl.load(t_ptr + row), SIZE, 32, ID_ORDER, BCAST)
    tl.store(out_ptr + row, tl.where(ok, token, -1))


torch.manual_seed(11)
with CudaToCpu():
    d = inputs._make_inputs(batch=16, vocab=2000, tie_rows=True)
probs, vocab, size = d["probs"], d["probs"].shape[1], 256
t_sel = torch.full((16,), 2.0 ** -12)
buf_v, buf_i = torch.zeros(16, size), torch.zeros(16, size, dtype=torch.int32)
shuf_v, shuf_i = buf_v.clone(), buf_i.clone()
n = torch.zeros(16, dtype=torch.int32)
for r in range(16):
    ids = (probs[r] >= t_sel[r]).nonzero().flatten()[:size]
    n[r] = ids.numel()
    buf_v[r, :n[r]], buf_i[r, :n[r]] = probs[r, ids], ids.to(torch.int32)
    perm = torch.randperm(int(n[r]))
    shuf_v[r, :n[r]], shuf_i[r, :n[r]] = probs[r, ids[perm]], ids[perm].to(torch.int32)
total = probs.sum(1)
outs = []
for v, i, id_order, bcast in ((buf_v, buf_i, False, False), (shuf_v, shuf_i, True, False),
                              (shuf_v, shuf_i, True, True)):
    out = torch.zeros(16, dtype=torch.int32)
    _draw[(16,)](v, i, n, d["top_k"].to(torch.int32), d["top_p"], d["uniform"], total, t_sel,
                 out, vocab, SIZE=size, ID_ORDER=id_order, BCAST=bcast)
    outs.append(out.tolist())
print(json.dumps({"n": n.tolist(), "ordered": outs[0], "shuffled": outs[1],
                  "shuffled_broadcast": outs[2]}))
"""


@pytest.mark.slow
def test_the_draw_by_token_id_over_a_shuffled_buffer_is_the_ordered_draw():
    """The interpreter runs a program's atomics in lane order, so the atomic compaction writes
    its buffer in token-id order there; this draws from buffers shuffled on purpose (ties,
    top-k and top-p cuts included) and compares with the ordered buffer's draw, with the pairwise
    steps' candidates broadcast as vectors and loaded as tiles (SELECT_BCAST)."""
    run = subprocess.run([sys.executable, "-c", SHUFFLED, str(OP)], capture_output=True,
                         text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert max(got["n"]) > 1 and got["shuffled"] == got["ordered"]
    assert got["shuffled_broadcast"] == got["ordered"]
    assert sum(token >= 0 for token in got["ordered"]) >= 12  # rows the buffer decides
