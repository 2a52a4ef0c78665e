"""autotune: finds the launch constants with ast, rewrites them in place, and the rewritten modules
still pass the runner."""

from __future__ import annotations

import ast
import random

from atrex.agent.measure import source_sha
from atrex.agent.memory import MemoryItem
from atrex.agent.profiling import Profile
from atrex.agent.proposers.autotune import (
    AutotuneProposer,
    apply_settings,
    find_tunables,
    kind_of,
    neighbourhood,
)
from atrex.agent.proposers.base import ProposalContext
from atrex.runner.evaluate import EvalOptions, evaluate
from atrex.runner.repo import load_repo
from atrex.runner.sandbox import CandidateRef
from conftest import NAIVE

NAIVE_RMSNORM = (NAIVE / "rmsnorm" / "kernel.py").read_text()
NAIVE_ADD = (NAIVE / "fused_add_rmsnorm" / "kernel.py").read_text()


def test_kinds_and_tunables():
    assert kind_of("num_warps") == "warps" and kind_of("MAX_WARPS") == "warps"
    assert kind_of("num_stages") == "stages" and kind_of("GROUP_M") == "group"
    assert kind_of("ROWS_PER_PROGRAM") == "rows" and kind_of("BLOCK_SIZE") == "block"
    assert kind_of("eps") is None
    found = {t.key: (t.kind, t.value) for t in find_tunables(NAIVE_RMSNORM)}
    assert found == {"BLOCK_SIZE": ("block", 64), "NUM_WARPS": ("warps", 1)}
    launch = {t.key.split("@")[0]: t.value for t in find_tunables(NAIVE_ADD)}
    assert launch == {"BLOCK_SIZE": 64, "num_warps": 1}


def test_rewrite_keeps_everything_but_the_literals():
    tunables = find_tunables(NAIVE_ADD)
    values = {t.key: (256 if t.kind == "block" else 4) for t in tunables}
    new = apply_settings(NAIVE_ADD, tunables, values)
    assert "BLOCK_SIZE=256, num_warps=4" in new
    old_lines, new_lines = NAIVE_ADD.splitlines(), new.splitlines()
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b]
    assert len(changed) == 1  # comments, docstrings and layout untouched
    ast.parse(new)


def test_neighbourhood_follows_the_bottleneck():
    tunables = find_tunables(NAIVE_RMSNORM)
    latency = neighbourhood(tunables, "latency")
    assert latency[0].summary() == "BLOCK_SIZE 64->256, NUM_WARPS 1->4"  # up, coupled, far
    occupancy = [c.summary() for c in neighbourhood(tunables, "occupancy")]
    assert occupancy.index("NUM_WARPS 1->2") < occupancy.index("BLOCK_SIZE 64->128")


def _context(source: str, memory=()) -> ProposalContext:
    op = load_repo(NAIVE, ["rmsnorm"]).op("rmsnorm")
    return ProposalContext(
        op=op, family="rmsnorm", dtype="bf16", gpu="h200_sxm", reference_source="",
        incumbent_source=source, incumbent_sha=source_sha(source), incumbent=None,
        profile=Profile("latency", "runner", None, ""), memory=list(memory), kb_notes=[],
        kb_kernels=[], iteration=1, rng=random.Random(0), target_fraction=0.9)


def test_proposer_skips_settings_already_measured():
    proposer = AutotuneProposer(batch=2)
    first = proposer.propose(_context(NAIVE_RMSNORM))
    assert len(first) == 2
    memory = [MemoryItem(i + 1, 1, "autotune", "pass", False, "", p.summary,
                         source_sha(NAIVE_RMSNORM), source_sha(p.source), meta=p.meta)
              for i, p in enumerate(first)]
    second = proposer.propose(_context(NAIVE_RMSNORM, memory))
    assert {p.meta["autotune"] for p in second}.isdisjoint({p.meta["autotune"] for p in first})
    assert AutotuneProposer().propose(_context("import torch\nclass Model: pass\n")) is None


def test_autotuned_modules_still_pass_the_runner(naive_ops, tmp_path):
    repo = load_repo(naive_ops, ["rmsnorm"])
    proposals = AutotuneProposer(batch=3).propose(_context(NAIVE_RMSNORM))
    plan = []
    for index, proposal in enumerate(proposals):
        directory = tmp_path / f"cand{index}"
        directory.mkdir()
        (directory / "kernel.py").write_text(proposal.source)
        plan.append(CandidateRef(f"c{index}", directory / "kernel.py", directory))
    reports = evaluate(repo, {"rmsnorm": plan}, EvalOptions(device="cpu"))
    for label, report in reports.items():
        op = report.op("rmsnorm")
        assert op.status.value == "pass", (label, op.shapes[0].message)
        assert op.own_kernel_share == 1.0
