"""The work counter on CUDA tensors: the judge counts the reference on the GPU it times, so the
rules must give there what they give on the CPU (tests/runner/test_work_counter.py). Measured on
the H200 at 893c4d2, the causal prefill reference counted 206 GFLOP for 4 x 2048 tokens (32
heads, d 128) against 137.5 GFLOP of causal pairs, with no rule reporting a fallback: the
masked_fill rule kept the reference's CUDA mask while the tril rule's masks are CPU tensors, and
matmul_share, mixing the two, raised, so the PV product counted its known zeros. Masks are now
kept on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from atrex.runner.work.counter import WorkCounter

pytestmark = pytest.mark.gpu
SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "suite"


def _reference(op: str):
    spec = importlib.util.spec_from_file_location(f"gpu_count_{op}", SUITE / op / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model()


def _count(model, inputs: dict):
    counter = WorkCounter()
    counter.add_inputs(inputs, model)
    with torch.no_grad(), counter:
        out = model(**inputs)
    return counter.result({"out": out}), sorted(counter.tracker.conservative)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_causal_varlen_prefill_counts_the_causal_pairs_on_either_device(device):
    lengths, heads, kv_heads, dim = [64, 33, 128], 4, 2, 32
    total = sum(lengths)
    cu = torch.tensor([0, 64, 97, 225], dtype=torch.int32, device=device)
    inputs = {"q": torch.randn(total, heads, dim, dtype=torch.bfloat16, device=device),
              "k": torch.randn(total, kv_heads, dim, dtype=torch.bfloat16, device=device),
              "v": torch.randn(total, kv_heads, dim, dtype=torch.bfloat16, device=device),
              "cu_seqlens": cu, "max_seqlen": max(lengths)}
    work, conservative = _count(_reference("prefill_attention_gqa"), inputs)
    pairs = sum(n * (n + 1) // 2 for n in lengths)
    assert work.flops["bf16"] == 4 * heads * pairs * dim, conservative
