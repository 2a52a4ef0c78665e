"""Inputs that share storage: grouping tensors by the storage they live in, and copying a group
once with every view rebuilt on the copy (same offsets, shapes and strides), so inputs that alias
(K and V caches as views of one KV pool, say) still alias in the copy, on the wire, in the
judge's clones and in the executor's graph copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ALIGN = 16  # every element size divides it, so a view's offset stays whole after alignment


@dataclass(frozen=True)
class StorageGroup:
    names: tuple[str, ...]
    lo: int  # byte range of the storage the views cover, aligned to ALIGN
    hi: int

    @property
    def aliased(self) -> bool:
        return len(self.names) > 1


def storage_groups(inputs: dict) -> list[StorageGroup]:
    """Tensor inputs grouped by storage, in input order; empty tensors are left out."""
    members: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.numel() > 0:
            storage = value.untyped_storage()
            key = storage.data_ptr()
            members.setdefault(key, []).append(name)
            sizes[key] = storage.nbytes()
    groups = []
    for key, names in members.items():
        lo = min(inputs[n].storage_offset() * inputs[n].element_size() for n in names)
        hi = max(end_byte(inputs[n]) for n in names)
        lo = lo - lo % ALIGN
        hi = min(-(-hi // ALIGN) * ALIGN, sizes[key])
        groups.append(StorageGroup(tuple(names), lo, hi))
    return groups


def byte_view(tensor: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """The bytes [lo, hi) of a tensor's storage, as a uint8 tensor on the same storage."""
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(
        tensor.untyped_storage(), lo, (hi - lo,))


def rebuild(original: torch.Tensor, span: torch.Tensor, lo: int) -> torch.Tensor:
    """`original`'s view (offset, shape, strides, dtype) on `span`, a copy of its storage's
    bytes from `lo` on."""
    size = original.element_size()
    offset = (original.storage_offset() * size - lo) // size
    return torch.empty(0, dtype=original.dtype, device=span.device).set_(
        span.untyped_storage(), offset, original.shape, original.stride())


def end_byte(tensor: torch.Tensor) -> int:
    extent = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride(), strict=True))
    return (tensor.storage_offset() + extent) * tensor.element_size()


def copy_keeping_aliases(inputs: dict, device: torch.device | str | None = None,
                         dtype_of=None) -> dict:
    """A copy of `inputs` (on `device`, or where they are): tensors that share a storage are
    copied as one span with their views rebuilt on it; other values are kept. `dtype_of(t)`
    may give a dtype to cast a tensor to; an aliasing group is cast as one span when all its
    views have one dtype (else its tensors are cast one by one, and no longer alias)."""
    values = dict(inputs)
    for group in storage_groups(inputs):
        first = inputs[group.names[0]]
        target = dtype_of(first) if dtype_of else None
        same = all(inputs[n].dtype == first.dtype for n in group.names)
        if not group.aliased or (target not in (None, first.dtype) and not same):
            for name in group.names:
                tensor = inputs[name]
                cast = dtype_of(tensor) if dtype_of else None
                values[name] = _copy(tensor, device, cast)
            continue
        span = byte_view(first, group.lo, group.hi)
        if target not in (None, first.dtype):
            span = _cast_span(span, first.dtype, target, device)
            for name in group.names:
                values[name] = _rebuild_cast(inputs[name], span, group.lo)
            continue
        span = span.to(device, copy=True) if device is not None else span.clone()
        for name in group.names:
            values[name] = rebuild(inputs[name], span, group.lo)
    for name, value in inputs.items():  # empty tensors
        if isinstance(value, torch.Tensor) and value.numel() == 0:
            values[name] = _copy(value, device, dtype_of(value) if dtype_of else None)
    return values


def _copy(tensor: torch.Tensor, device, dtype) -> torch.Tensor:
    out = tensor.to(device=device if device is not None else tensor.device,
                    dtype=dtype or tensor.dtype, copy=True)
    return out


def _cast_span(span: torch.Tensor, dtype: torch.dtype, target: torch.dtype, device):
    elements = span.view(dtype)
    return elements.to(device=device if device is not None else span.device, dtype=target,
                       copy=True)


def _rebuild_cast(original: torch.Tensor, span: torch.Tensor, lo: int) -> torch.Tensor:
    """`original`'s view on a span that was cast element for element (offsets and strides
    count elements, so they carry over)."""
    offset = (original.storage_offset() * original.element_size() - lo) // \
        original.element_size()
    return torch.empty(0, dtype=span.dtype, device=span.device).set_(
        span.untyped_storage(), offset, original.shape, original.stride())
