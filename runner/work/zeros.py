"""Elements whose value is known without computing them: the masked places of an attention
written out by hand.

A reference that fills masked scores with -inf (``masked_fill``, ``tril``) and takes a softmax
produces probabilities that are exactly zero there; the matmul with the values multiplies by
those zeros. A kernel skips both: the scores' masked places are never computed (the lineage
rule of ``masked_fill`` makes them dead, so their FLOPs are not counted) and the zero
probabilities never multiplied (:func:`matmul_share`). Masks are real boolean tensors,
broadcastable to the tensor (same rank, size 1 where they do not vary), on the CPU whatever the
reference's device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .maps import MAX_TABLE, _reshape_groups

_SOFTMAX = {"_softmax", "_safe_softmax", "softmax"}
_COPIES = {"clone", "_to_copy", "contiguous", "alias", "detach", "lift_fresh", "to"}
_DIMWISE_VIEWS = {"permute", "transpose", "t", "unsqueeze", "squeeze", "select", "slice",
                  "expand"}
_RESHAPES = {"view", "_unsafe_view", "reshape", "_reshape_alias"}


@dataclass(frozen=True)
class Const:
    mask: torch.Tensor  # True where the element is `value` whatever the inputs
    value: float


def _aligned(mask: torch.Tensor, rank: int) -> torch.Tensor:
    return mask.reshape((1,) * (rank - mask.dim()) + tuple(mask.shape))


def propagate(consts, func, b: dict, out) -> None:
    """Record which elements of the outputs are known constants."""
    if not isinstance(out, torch.Tensor) and func._overloadpacket.__name__ != "masked_fill_":
        return
    name = func._overloadpacket.__name__
    src = b.get("self", b.get("input"))
    if name in ("masked_fill", "masked_fill_"):
        _masked_fill(consts, b, out if name == "masked_fill" else b["self"])
    elif name in ("tril", "triu") and src is not None and src.dim() >= 2:
        rows, cols = src.shape[-2:]
        if rows * cols <= MAX_TABLE:
            keep = torch.ones(rows, cols, dtype=torch.bool)
            keep = keep.tril(b.get("diagonal", 0)) if name == "tril" else keep.triu(
                b.get("diagonal", 0))
            consts[out] = Const(_aligned(~keep, out.dim()), 0.0)
    elif isinstance(src, torch.Tensor) and src in consts:
        c = consts[src]
        if name in _SOFTMAX and c.value == float("-inf"):
            consts[out] = Const(c.mask, 0.0)
        elif name == "_log_softmax" and c.value == float("-inf"):
            consts[out] = Const(c.mask, c.value)
        elif name in _COPIES and tuple(out.shape) == tuple(src.shape):
            consts[out] = c
        elif name in _DIMWISE_VIEWS or name in _RESHAPES:
            moved = _view(func, b, c.mask, src, out)
            if moved is not None:
                consts[out] = Const(moved, c.value)
    if name in ("mul", "div") and isinstance(out, torch.Tensor):
        _zero_product(consts, b, out, numerator_only=name == "div")


def _masked_fill(consts, b: dict, target: torch.Tensor) -> None:
    mask, value = b["mask"], b["value"]
    if mask.device.type == "meta" or isinstance(value, torch.Tensor) or mask.dim() > target.dim():
        return
    # masks are kept on the CPU, as the tril rule makes them: a CUDA reference's mask mixed
    # with CPU ones failed in matmul_share, and the PV product of a causal reference counted
    # its zeros (1.5x the work on the H200 at 893c4d2)
    mask = _aligned(mask.to(device="cpu", dtype=torch.bool), target.dim())
    old = consts.get(b["self"])
    if old is not None and old.value == float(value):
        mask = mask | old.mask
    consts[target] = Const(mask, float(value))


def _zero_product(consts, b: dict, out: torch.Tensor, numerator_only: bool) -> None:
    operands = [b.get("self")] if numerator_only else [b.get("self"), b.get("other")]
    masks = [consts[t].mask for t in operands if isinstance(t, torch.Tensor) and t in consts
             and consts[t].value == 0.0 and t.dim() <= out.dim()]
    if masks:
        mask = masks[0] if len(masks) == 1 else _aligned(masks[0], out.dim()) | _aligned(
            masks[1], out.dim())
        consts[out] = Const(_aligned(mask, out.dim()), 0.0)


def _view(func, b: dict, mask: torch.Tensor, src: torch.Tensor, out: torch.Tensor):
    """The mask of a view: dim by dim on the broadcast mask, or expanded then reshaped."""
    name = func._overloadpacket.__name__
    try:
        if name in _RESHAPES:
            return _reshaped(mask, tuple(src.shape), tuple(out.shape))
        if name == "expand":
            return _aligned(mask, out.dim())
        if name in ("select", "slice"):
            dim = b["dim"] % src.dim()
            if mask.shape[dim] == 1:
                return mask.squeeze(dim) if name == "select" else mask
            if name == "select":
                return mask.select(dim, b["index"])
            return mask[(slice(None),) * dim + (slice(b["start"], b["end"], b["step"]),)]
        if name == "t":
            return mask.t() if mask.dim() == 2 else mask
        if name == "squeeze":
            dim = b.get("dim")
            dims = range(src.dim()) if dim is None else [dim] if isinstance(dim, int) else dim
            return mask.squeeze(tuple(d % src.dim() for d in dims if src.shape[d] == 1))
        return func(mask, *[b[a.name] for a in func._schema.arguments[1:] if a.name in b])
    except (RuntimeError, IndexError, TypeError):
        return None


def _reshaped(mask: torch.Tensor, old: tuple, new: tuple) -> torch.Tensor | None:
    """A broadcast mask through a reshape, group by group: a group the mask does not vary over
    stays size 1; one it varies over is expanded first (if small enough)."""
    if old == new:
        return mask
    sizes: list[int] = []
    expand = list(mask.shape)
    for (o0, o1), (n0, n1) in _reshape_groups(old, new):
        if all(mask.shape[d] == 1 for d in range(o0, o1)):
            sizes += [1] * (n1 - n0)
        else:
            expand[o0:o1] = old[o0:o1]
            sizes += list(new[n0:n1])
    if math.prod(expand) > MAX_TABLE:
        return None
    return mask.expand(*expand).reshape(sizes)


def matmul_share(consts, a: torch.Tensor, b: torch.Tensor) -> float:
    """The share of a (batched) matmul's multiply-adds whose operands are not known zeros."""
    ca, cb = consts.get(a), consts.get(b)
    if (ca is None or ca.value != 0.0) and (cb is None or cb.value != 0.0):
        return 1.0
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    valid_a = ~ca.mask if ca is not None and ca.value == 0.0 else torch.ones(
        (1,) * a.dim(), dtype=torch.bool)
    valid_b = ~cb.mask if cb is not None and cb.value == 0.0 else torch.ones(
        (1,) * b.dim(), dtype=torch.bool)
    per_k_a = valid_a.sum(-2) if valid_a.shape[-2] > 1 else valid_a.select(-2, 0) * m
    per_k_b = valid_b.sum(-1) if valid_b.shape[-1] > 1 else valid_b.select(-1, 0) * n
    batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    per_k_a = per_k_a.reshape((1,) * (len(batch) + 1 - per_k_a.dim()) + tuple(per_k_a.shape))
    per_k_b = per_k_b.reshape((1,) * (len(batch) + 1 - per_k_b.dim()) + tuple(per_k_b.shape))
    pairs = (per_k_a.double() * per_k_b.double()).expand(*batch, k).sum()
    return float(pairs) / (math.prod(batch) * m * k * n) if m * k * n else 1.0
