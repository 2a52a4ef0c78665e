"""Comparing a candidate's output with the reference's.

Structure (keys, shapes, dtypes, device) must match the reference run in the native dtype; values
are compared against the high-precision reference. NaN never passes, an Inf must be the
reference's Inf, integer outputs must be exact.

The tolerance of a floating output is grounded in the framework's own error. On the same inputs
the judge also runs the reference at its native dtype (bf16 PyTorch, say) and measures how far
*that* is from the high-precision oracle. With e(x) = max over elements of
|x - ref| / (atol + rtol |ref|) and l2(x) = ||x - ref|| / ||ref||, a candidate c passes when

    e(c) <= max(1, REFERENCE_ERROR_MULTIPLE * e(native))   and
    l2(c) <= max(rel_l2, REFERENCE_ERROR_MULTIPLE * l2(native)).

So the configured atol/rtol/rel-L2 hold wherever PyTorch's own computation meets them, and where
PyTorch itself does not (bf16 attention with large logits, a long bf16 reduction), a candidate may
be as far off as a stated multiple of PyTorch's own error, never more. The native-dtype reference
always passes its own check (e(native) <= 2 e(native)); a candidate ten times less accurate than
it fails wherever the reference is anywhere near the configured bounds.
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


# How many times the native-dtype reference's own error a candidate may err (see the docstring).
REFERENCE_ERROR_MULTIPLE = 2.0


@dataclass
class Comparison:
    ok: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    problem: str | None = None
    kind: FindingKind | None = None
    rel_l2_error: float | None = None  # ||c - ref|| / ||ref||, the worst output
    reference_max_abs_error: float | None = None  # the native-dtype reference against the oracle
    reference_rel_l2_error: float | None = None


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
                    tolerance_for, native: dict[str, torch.Tensor] | None = None,
                    masks: dict[str, torch.Tensor] | None = None,
                    multiple: float = REFERENCE_ERROR_MULTIPLE) -> Comparison:
    """`native`: the reference run at its native dtype on the same inputs (the bound grows to
    `multiple` times its error); `masks`: per output, the elements the operation defines (the
    others are not compared)."""
    worst = Comparison(ok=True, max_abs_error=0.0, max_rel_error=0.0, rel_l2_error=0.0)
    for name, cand in candidate.items():
        ref = reference[name].to(cand.device)
        own = native.get(name) if native else None
        mask = masks.get(name) if masks else None
        if mask is not None:
            cand, ref, own = _masked(cand, ref, own, mask.to(cand.device))
        result = _compare_tensor(name, cand, ref, tolerance_for(cand.dtype), own, multiple)
        if not result.ok:
            return result
        _keep_worst(worst, result)
    return worst


def _masked(cand, ref, own, mask):
    mask = mask.to(torch.bool).expand(cand.shape)
    own = own.to(cand.device)[mask] if own is not None and own.shape == cand.shape else None
    return cand[mask], ref[mask], own


def _keep_worst(worst: Comparison, result: Comparison) -> None:
    for name in ("max_abs_error", "max_rel_error", "rel_l2_error", "reference_max_abs_error",
                 "reference_rel_l2_error"):
        value = getattr(result, name)
        if value is not None:
            setattr(worst, name, max(getattr(worst, name) or 0.0, value))


@dataclass(frozen=True)
class _Errors:
    max_abs: float
    max_rel: float
    ratio: float  # max |x - ref| / (atol + rtol |ref|): 1 is the configured bound
    rel_l2: float
    outside: int  # elements beyond the configured bound
    first: int | None  # flat index of the first of them


def _errors(x: torch.Tensor, r: torch.Tensor, tol: Tolerance) -> _Errors:
    diff = (x - r).abs()
    bound = tol.atol + tol.rtol * r.abs()
    ratio = torch.where(bound > 0, diff / bound.clamp_min(1e-300),
                        torch.where(diff > 0, torch.full_like(diff, torch.inf), diff))
    bad = diff > bound
    ref_norm = float(torch.linalg.vector_norm(r))
    outside = int(bad.sum())
    return _Errors(max_abs=float(diff.max()),
                   max_rel=float((diff / r.abs().clamp_min(tol.atol or 1e-12)).max()),
                   ratio=float(ratio.max()), outside=outside,
                   rel_l2=float(torch.linalg.vector_norm(x - r)) / ref_norm if ref_norm > 0
                   else 0.0,
                   first=int(torch.nonzero(bad.flatten())[0]) if outside else None)


def _compare_tensor(name: str, cand: torch.Tensor, ref: torch.Tensor, tol: Tolerance | None,
                    native: torch.Tensor | None = None,
                    multiple: float = REFERENCE_ERROR_MULTIPLE) -> Comparison:
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
    n = _native_values(native, cand, finite)
    c, r = c[finite], r[finite]
    if c.numel() == 0:
        return Comparison(ok=True, max_abs_error=0.0, max_rel_error=0.0, rel_l2_error=0.0)
    if tol is None:
        return _fail(name, f"no tolerance configured for {cand.dtype}", FindingKind.MISMATCH)
    got = _errors(c, r, tol)
    own = _errors(n, r, tol) if n is not None else None
    allowed_ratio = max(1.0, multiple * own.ratio) if own else 1.0
    allowed_l2 = max(tol.rel_l2, multiple * own.rel_l2) if own else tol.rel_l2
    result = Comparison(ok=True, max_abs_error=got.max_abs, max_rel_error=got.max_rel,
                        rel_l2_error=got.rel_l2,
                        reference_max_abs_error=own.max_abs if own else None,
                        reference_rel_l2_error=own.rel_l2 if own else None)
    if got.ratio > allowed_ratio:
        result.ok, result.kind = False, FindingKind.MISMATCH
        result.problem = (f"{name}: {got.outside} of {c.numel()} elements outside "
                          f"atol={tol.atol:g} rtol={tol.rtol:g} (max abs error {got.max_abs:.3g}; "
                          f"first at flat index {got.first}: got {float(c[got.first]):.6g}, "
                          f"expected {float(r[got.first]):.6g}){_own_note(own, multiple)}")
    elif got.rel_l2 > allowed_l2:
        result.ok, result.kind = False, FindingKind.MISMATCH
        result.problem = (f"{name}: relative L2 error {got.rel_l2:.3g} exceeds "
                          f"{allowed_l2:.3g}{_own_note(own, multiple)}")
    return result


def _native_values(native: torch.Tensor | None, cand: torch.Tensor,
                   finite: torch.Tensor) -> torch.Tensor | None:
    """The native-dtype reference's values where the oracle is finite; None when it did not
    produce a comparable, finite output (then only the configured bounds apply)."""
    if native is None or native.shape != cand.shape or not (native.dtype.is_floating_point
                                                            or native.dtype.is_complex):
        return None
    n = native.detach().to(cand.device).to(torch.float64)[finite]
    return n if bool(torch.isfinite(n).all()) else None


def _own_note(own: _Errors | None, multiple: float) -> str:
    if own is None:
        return ""
    return (f"; the reference at its native dtype: max abs error {own.max_abs:.3g}, "
            f"{own.outside} outside, relative L2 {own.rel_l2:.3g} (a candidate may err "
            f"{multiple:g}x as much)")


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
