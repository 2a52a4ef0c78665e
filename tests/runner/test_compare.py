"""Output comparison: tolerances, NaN/Inf, integers, structure."""

from __future__ import annotations

import pytest
import torch
from atrex.runner.config import DEFAULT_TOLERANCES
from atrex.runner.judge.compare import (
    Expected,
    StructureError,
    check_structure,
    compare_outputs,
    same_bytes,
)
from atrex.runner.model import FindingKind


def tol(dtype):
    return DEFAULT_TOLERANCES.get(str(dtype).replace("torch.", ""))


def ref_and_bf16(values):
    ref = torch.tensor(values, dtype=torch.float64)
    return ref, ref.to(torch.bfloat16)


def test_bf16_rounding_passes():
    ref = torch.randn(1000, dtype=torch.float64)
    result = compare_outputs({"out": ref.to(torch.bfloat16)}, {"out": ref}, tol)
    assert result.ok and result.max_abs_error < 0.02


def test_nan_never_passes():
    ref, cand = ref_and_bf16([1.0, 2.0, 3.0])
    cand[1] = float("nan")
    result = compare_outputs({"out": cand}, {"out": ref}, tol)
    assert not result.ok and result.kind is FindingKind.NON_FINITE


def test_inf_must_match_reference():
    ref, cand = ref_and_bf16([1.0, float("inf"), 3.0])
    assert compare_outputs({"out": cand}, {"out": ref}, tol).ok
    cand[0] = float("inf")
    assert not compare_outputs({"out": cand}, {"out": ref}, tol).ok


def test_near_zero_output_fails_relative_l2():
    """Softmax-like outputs are all below atol; zeros must still fail."""
    generator = torch.Generator().manual_seed(0)
    logits = 0.5 * torch.randn(4, 4096, dtype=torch.float64, generator=generator)
    ref = torch.softmax(logits, dim=-1)
    assert ref.max() < DEFAULT_TOLERANCES["bfloat16"].atol  # every element passes atol alone
    zeros = torch.zeros(4, 4096, dtype=torch.bfloat16)
    result = compare_outputs({"out": zeros}, {"out": ref}, tol)
    assert not result.ok and "relative L2" in result.problem


def test_integers_exact():
    ref = torch.tensor([1, 2, 3])
    assert compare_outputs({"out": ref.clone()}, {"out": ref}, tol).ok
    assert not compare_outputs({"out": torch.tensor([1, 2, 4])}, {"out": ref}, tol).ok


def test_structure_checks():
    expected = {"out": Expected((2, 3), torch.bfloat16, "cpu")}
    check_structure(torch.zeros(2, 3, dtype=torch.bfloat16), expected)
    for bad in (torch.zeros(3, 2, dtype=torch.bfloat16), torch.zeros(2, 3),
                {"y": torch.zeros(2, 3, dtype=torch.bfloat16)}, [1, 2]):
        with pytest.raises(StructureError):
            check_structure(bad, expected)


def test_same_bytes_is_nan_safe_and_handles_scalars():
    a = torch.tensor([float("nan"), 1.0])
    assert same_bytes(a, a.clone())
    assert same_bytes(torch.tensor(3.0), torch.tensor(3.0))
    assert not same_bytes(torch.tensor(3.0), torch.tensor(4.0))
