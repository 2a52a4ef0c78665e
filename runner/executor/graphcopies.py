"""The input copies behind one graph replay (`atrex.runner.contract.graphplan` decides how many).

Inputs are grouped by the storage they live in; a group is copied as one byte range (the span its
views cover) and every view is rebuilt on the copy with its own offset, shape and strides, so
aliasing inputs still alias and layouts are what the judge sent. A `CallInputs` keeps the spans
it owns, so the groups updated in place can be restored with one device copy each.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..contract.graphplan import TensorSpec
from ..contract.storage import StorageGroup, byte_view, rebuild, storage_groups

__all__ = ["CallInputs", "StorageGroup", "copy_inputs", "output_bytes", "restore", "spans_of",
           "storage_groups", "tensor_specs"]


@dataclass
class CallInputs:
    """One call's inputs and the byte spans of its storage groups (group index -> uint8 tensor)."""

    values: dict
    spans: dict[int, torch.Tensor] = field(default_factory=dict)


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
    spans = {index: byte_view(inputs[g.names[0]], g.lo, g.hi)
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
        source = byte_view(inputs[group.names[0]], group.lo, group.hi)
        span = source.clone()
        spans[index] = span
        for name in group.names:
            values[name] = rebuild(inputs[name], span, group.lo)
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


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict):
        for value in out.values():
            yield from _tensors(value)
    elif isinstance(out, tuple | list):
        for value in out:
            yield from _tensors(value)
