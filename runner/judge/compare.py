"""Comparing a candidate's output with the reference's.

Structure (keys, shapes, dtypes, device) must match the reference run in the native dtype; values
are compared against the high-precision reference with per-dtype tolerances. NaN never passes, an
Inf must be the reference's Inf, integer outputs must be exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import Tolerance
from ..model import FindingKind


class StructureError(Exception):
    pass


@dataclass(frozen=True)
class Expected:
    shape: tuple[int, ...]
    dtype: torch.dtype
    device_type: str


@dataclass
class Comparison:
    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    problem: str | None = None
    kind: FindingKind | None = None


def flatten_output(out) -> dict[str, object]:
    """Name every tensor of an output: a tensor, a dict of tensors, or a tuple/list of them."""
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items()}
    if isinstance(out, tuple | list):
        return {str(i): v for i, v in enumerate(out)}
    return {"out": out}


def expected_structure(reference_out) -> dict[str, Expected]:
    flat = flatten_output(reference_out)
    result = {}
    for name, value in flat.items():
        if not isinstance(value, torch.Tensor):
            raise StructureError(f"the reference returned {type(value).__name__} for {name!r}")
        result[name] = Expected(tuple(value.shape), value.dtype, value.device.type)
    return result


def check_structure(out, expected: dict[str, Expected]) -> dict[str, torch.Tensor]:
    """The returned outputs against the expected ones (in-place updated inputs, "input:<name>",
    are not returned; the caller adds them after the call)."""
    flat = flatten_output(out)
    expected = {k: v for k, v in expected.items() if not k.startswith("input:")}
    if set(flat) != set(expected):
        raise StructureError(f"output keys {sorted(flat)} differ from the reference's "
                             f"{sorted(expected)}")
    for name, value in flat.items():
        check_tensor(name, value, expected[name])
    return flat


def check_tensor(name: str, value, want: Expected) -> None:
    if not isinstance(value, torch.Tensor):
        raise StructureError(f"output {name!r} is a {type(value).__name__}, not a tensor")
    if tuple(value.shape) != want.shape:
        raise StructureError(f"output {name!r} has shape {tuple(value.shape)}, the reference "
                             f"{want.shape}")
    if value.dtype != want.dtype:
        raise StructureError(f"output {name!r} has dtype {value.dtype}, the reference "
                             f"{want.dtype}")
    if value.device.type != want.device_type:
        raise StructureError(f"output {name!r} is on {value.device.type}, the reference on "
                             f"{want.device_type}")


def compare_outputs(candidate: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
                    tolerance_for) -> Comparison:
    worst_abs, worst_rel = 0.0, 0.0
    for name, cand in candidate.items():
        ref = reference[name]
        tol = tolerance_for(cand.dtype)
        result = _compare_tensor(name, cand, ref.to(cand.device), tol)
        if not result.ok:
            return result
        worst_abs = max(worst_abs, result.max_abs_error or 0.0)
        worst_rel = max(worst_rel, result.max_rel_error or 0.0)
    return Comparison(ok=True, max_abs_error=worst_abs, max_rel_error=worst_rel)


def _compare_tensor(name: str, cand: torch.Tensor, ref: torch.Tensor,
                    tol: Tolerance | None) -> Comparison:
    if not (cand.dtype.is_floating_point or cand.dtype.is_complex):
        equal = torch.equal(cand, ref.to(cand.dtype))
        mismatches = 0 if equal else int((cand != ref.to(cand.dtype)).sum())
        return Comparison(ok=equal, max_abs_error=0.0 if equal else None,
                          problem=None if equal else f"{name}: {mismatches} of {cand.numel()} "
                          "integer elements differ (integers must match exactly)",
                          kind=None if equal else FindingKind.MISMATCH)
    c = cand.detach().to(torch.float64)
    r = ref.detach().to(torch.float64)
    if torch.isnan(c).any():
        return _fail(name, f"{int(torch.isnan(c).sum())} NaN values", FindingKind.NON_FINITE)
    if torch.isnan(r).any():
        return _fail(name, "the reference produced NaN for this input", FindingKind.NON_FINITE)
    inf_mismatch = torch.isinf(c) != torch.isinf(r)
    inf_mismatch |= torch.isinf(r) & (c != r)
    if inf_mismatch.any():
        return _fail(name, f"{int(inf_mismatch.sum())} infinite values where the reference "
                     "differs", FindingKind.NON_FINITE)
    finite = torch.isfinite(r)
    c, r = c[finite], r[finite]
    if c.numel() == 0:
        return Comparison(ok=True, max_abs_error=0.0, max_rel_error=0.0)
    if tol is None:
        return _fail(name, f"no tolerance configured for {cand.dtype}", FindingKind.MISMATCH)
    diff = (c - r).abs()
    max_abs = float(diff.max())
    max_rel = float((diff / r.abs().clamp_min(tol.atol or 1e-12)).max())
    bad = diff > tol.atol + tol.rtol * r.abs()
    ref_norm = float(torch.linalg.vector_norm(r))
    rel_l2 = float(torch.linalg.vector_norm(c - r)) / ref_norm if ref_norm > 0 else 0.0
    if bad.any():
        index = int(torch.nonzero(bad.flatten())[0])
        return Comparison(ok=False, max_abs_error=max_abs, max_rel_error=max_rel,
                          kind=FindingKind.MISMATCH,
                          problem=f"{name}: {int(bad.sum())} of {bad.numel()} elements outside "
                          f"atol={tol.atol:g} rtol={tol.rtol:g} (max abs error {max_abs:.3g}; "
                          f"first at flat index {index}: got {float(c.flatten()[index]):.6g}, "
                          f"expected {float(r.flatten()[index]):.6g})")
    if rel_l2 > tol.rel_l2:
        return Comparison(ok=False, max_abs_error=max_abs, max_rel_error=max_rel,
                          kind=FindingKind.MISMATCH,
                          problem=f"{name}: relative L2 error {rel_l2:.3g} exceeds {tol.rel_l2:g}")
    return Comparison(ok=True, max_abs_error=max_abs, max_rel_error=max_rel)


def _fail(name: str, message: str, kind: FindingKind) -> Comparison:
    return Comparison(ok=False, problem=f"{name}: {message}", kind=kind)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-exact equality (NaN-safe), for checking that inputs were left untouched."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                       b.contiguous().reshape(-1).view(torch.uint8))
