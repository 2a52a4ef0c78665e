"""The input copies behind one graph replay (`runner.contract.graphplan` decides how many).

Inputs are grouped by the storage they live in; a group is copied as one byte range (the span its
views cover) and every view is rebuilt on the copy with its own offset, shape and strides, so
aliasing inputs still alias and layouts are what the judge sent. A `CallInputs` keeps the spans
it owns, so the groups updated in place can be restored with one device copy each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..contract.graphplan import TensorSpec

_ALIGN = 16  # every element size divides it, so a view's offset stays whole after alignment


@dataclass(frozen=True)
class StorageGroup:
    names: tuple[str, ...]
    lo: int  # byte range of the storage the views cover, aligned to _ALIGN
    hi: int


@dataclass
class CallInputs:
    """One call's inputs and the byte spans of its storage groups (group index -> uint8 tensor)."""

    values: dict
    spans: dict[int, torch.Tensor] = field(default_factory=dict)


def storage_groups(inputs: dict) -> list[StorageGroup]:
    """Tensor inputs grouped by storage, in input order; empty tensors are left out."""
    members: dict[int, list[str]] = {}
    storages: dict[int, torch.UntypedStorage] = {}
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.numel() > 0:
            storage = value.untyped_storage()
            key = storage.data_ptr()
            members.setdefault(key, []).append(name)
            storages[key] = storage
    groups = []
    for key, names in members.items():
        lo = min(inputs[n].storage_offset() * inputs[n].element_size() for n in names)
        hi = max(_end_byte(inputs[n]) for n in names)
        lo = lo - lo % _ALIGN
        hi = min(-(-hi // _ALIGN) * _ALIGN, storages[key].nbytes())
        groups.append(StorageGroup(tuple(names), lo, hi))
    return groups


def tensor_specs(inputs: dict, groups: list[StorageGroup], mutates: list[str]) -> list[TensorSpec]:
    specs = []
    for index, group in enumerate(groups):
        for name in group.names:
            value = inputs[name]
            specs.append(TensorSpec(name=name, group=index, span_bytes=group.hi - group.lo,
                                    integer=not (value.is_floating_point() or value.is_complex()),
                                    mutated=name in mutates))
    return specs


def output_bytes(out) -> int:
    """Bytes of an output's tensors (a tensor, or a dict/tuple/list of them), each storage once."""
    seen, total = set(), 0
    for value in _tensors(out):
        key = value.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += value.untyped_storage().nbytes()
    return total


def spans_of(inputs: dict, groups: list[StorageGroup],
             which: set[int] | None = None) -> CallInputs:
    """The inputs as they are, with byte views of their groups' spans (no copy)."""
    spans = {index: _byte_view(inputs[g.names[0]], g.lo, g.hi)
             for index, g in enumerate(groups) if which is None or index in which}
    return CallInputs(values=inputs, spans=spans)


def copy_inputs(inputs: dict, groups: list[StorageGroup],
                which: set[int] | None = None) -> CallInputs:
    """A copy of the inputs: each storage group copied once, its views rebuilt on the copy.
    With `which`, only those groups are copied (and only their tensors are in `values`)."""
    values = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)} \
        if which is None else {}
    spans = {}
    for index, group in enumerate(groups):
        if which is not None and index not in which:
            continue
        source = _byte_view(inputs[group.names[0]], group.lo, group.hi)
        span = source.clone()
        spans[index] = span
        for name in group.names:
            values[name] = _rebuild(inputs[name], span, group.lo)
    if which is None:
        for name, value in inputs.items():  # empty tensors: a fresh empty one each
            if isinstance(value, torch.Tensor) and name not in values:
                values[name] = value.clone()
        values = {name: values[name] for name in inputs}
    return CallInputs(values=values, spans=spans)


def restore(target: CallInputs, pristine: CallInputs) -> None:
    """The groups the pristine copy holds, written back into `target`'s spans."""
    for index, span in pristine.spans.items():
        target.spans[index].copy_(span)


def _rebuild(original: torch.Tensor, span: torch.Tensor, lo: int) -> torch.Tensor:
    size = original.element_size()
    offset = (original.storage_offset() * size - lo) // size
    return torch.empty(0, dtype=original.dtype, device=span.device).set_(
        span.untyped_storage(), offset, original.shape, original.stride())


def _byte_view(tensor: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(
        tensor.untyped_storage(), lo, (hi - lo,))


def _end_byte(tensor: torch.Tensor) -> int:
    extent = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride(), strict=True))
    return (tensor.storage_offset() + extent) * tensor.element_size()


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict):
        for value in out.values():
            yield from _tensors(value)
    elif isinstance(out, tuple | list):
        for value in out:
            yield from _tensors(value)
