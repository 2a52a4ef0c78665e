"""Running a reference at its real (GPU-sized) shapes on a CPU, to count its work.

Counting needs the values that decide *which* elements are touched (routing ids, block tables,
sequence lengths, masks) but not the large floating-point tensors themselves. Under
:class:`Hybrid`, every floating tensor of more than ``real_limit`` elements lives on the meta
device (a shape without storage); integer and boolean tensors and small floating tensors are
real CPU tensors, and an operation runs for real only when all its inputs are real and the
elements it touches fit a total budget. The rest runs on meta.

When the reference needs the values of a tensor that only exists as a shape (``.item()`` of a
large reduction, a mask computed from large floats used to index), :class:`NeedsValues` is
raised: such a shape has to be counted on a device that can hold it (``--device cpu|cuda``).
"""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils.flop_counter import flop_registry

META = torch.device("meta")
CPU = torch.device("cpu")

# Operations whose output shape depends on input values: they need real inputs.
_DATA_DEPENDENT = {"nonzero", "nonzero_static", "argwhere", "masked_select", "_unique2",
                   "_unique", "unique_consecutive", "unique_dim", "bincount", "histc",
                   "repeat_interleave", "_local_scalar_dense", "item"}
_INDEXING = {"index", "_unsafe_index", "index_put_", "index_put", "_index_put_impl_",
             "_unsafe_index_put"}


class NeedsValues(RuntimeError):
    """The reference needs the values of a tensor that is only a shape here."""


class Hybrid:
    def __init__(self, real_limit: int = 1 << 22, budget: int = 1 << 32):
        self.real_limit = real_limit
        self.budget = budget  # elements (plus matmul FLOPs) computed for real, in total
        self.stale: set[int] = set()  # storages of real tensors that meta work wrote into
        self._modes: list = []

    def __enter__(self) -> Hybrid:
        self._modes = [_Functions(self), _Dispatch(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        self._modes = []

    # ---- decisions ---------------------------------------------------------------------------

    def device_for(self, shape, dtype: torch.dtype | None) -> torch.device:
        dtype = dtype or torch.get_default_dtype()
        big = math.prod(int(s) for s in shape) > self.real_limit
        return META if (big and (dtype.is_floating_point or dtype.is_complex)) else CPU

    def known(self, t: torch.Tensor) -> bool:
        return t.device.type != "meta" and t.untyped_storage()._cdata not in self.stale

    def spend(self, amount: float) -> bool:
        if amount > self.budget:
            return False
        self.budget -= int(amount)
        return True


def _is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":")[0] == "cuda"
    return isinstance(device, int)


_FACTORIES = {f for f in _device_constructors()} - {torch.tensor, torch.as_tensor,
                                                    torch.asarray}


class _Functions(TorchFunctionMode):
    """Factory calls get the device their size and dtype call for; `.cuda()` is a no-op."""

    def __init__(self, hybrid: Hybrid):
        super().__init__()
        self.hybrid = hybrid

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.cuda, torch.Tensor.cpu):
            return args[0]
        if func is torch.nn.functional.scaled_dot_product_attention and any(
                t.device.type == "meta" for t in _tensors((args, kwargs))):
            # it checks devices before dispatching: all of it runs on meta
            args, kwargs = _to_meta((tuple(args), kwargs))
            return func(*args, **kwargs)
        if func is torch.Tensor.to:
            return self._to(func, args, kwargs)
        if func in (torch.tensor, torch.as_tensor, torch.asarray):
            kwargs["device"] = CPU
            return func(*args, **kwargs)
        device = kwargs.get("device")
        if func in _FACTORIES or getattr(func, "__name__", "").startswith("new_") or (
                device is not None and (_is_cuda(device) or str(device) in ("meta", "cpu"))):
            probe = func(*args, **{**kwargs, "device": META})
            if isinstance(probe, torch.Tensor):
                kwargs["device"] = self.hybrid.device_for(probe.shape, probe.dtype)
                if kwargs["device"] == META:
                    return probe
            elif device is not None:
                kwargs["device"] = CPU
        return func(*args, **kwargs)

    def _to(self, func, args, kwargs):
        """`.to(device)` keeps the tensor where it is (the CPU or meta); dtype changes stay."""
        args = list(args)
        if "device" in kwargs:
            kwargs.pop("device")
        rest = [a for a in args[1:] if not (_is_cuda(a) or isinstance(a, torch.device | str))]
        if not rest and not kwargs:
            return args[0]
        return func(args[0], *rest, **kwargs)


class _Dispatch(TorchDispatchMode):
    """Runs an op for real when it can and may; on meta otherwise."""

    def __init__(self, hybrid: Hybrid):
        super().__init__()
        self.hybrid = hybrid

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = func._overloadpacket.__name__
        tensors = _tensors((args, kwargs))
        if kwargs.get("device") is not None and not tensors:  # a factory
            probe = func(*args, **{**kwargs, "device": META})
            if not isinstance(probe, torch.Tensor) or self.hybrid.device_for(
                    probe.shape, probe.dtype) == META:
                return probe
            kwargs["device"] = CPU
            return func(*args, **kwargs)
        if _is_cuda(kwargs.get("device")):
            kwargs["device"] = CPU
        if _is_view(func) and all(t.device.type != "meta" for t in tensors):
            return func(*args, **kwargs)  # no data read: a view of a real (maybe stale) tensor
        if all(self.hybrid.known(t) for t in tensors) and self._may_run(func, args, kwargs,
                                                                        tensors):
            return func(*args, **kwargs)
        if name in _DATA_DEPENDENT:
            raise NeedsValues(f"aten.{name} needs the values of a large tensor that is only a "
                              "shape here")
        if name in _INDEXING:
            args, kwargs = _positions_for_meta(func, args, kwargs)
        meta_args, meta_kwargs = _to_meta((args, kwargs))
        if meta_kwargs.get("device") is not None:
            meta_kwargs["device"] = META
        out = func(*meta_args, **meta_kwargs)
        for t in _mutated(func, args, kwargs):
            if t.device.type != "meta":
                self.hybrid.stale.add(t.untyped_storage()._cdata)
        return _keep_inplace_identity(func, args, kwargs, out)

    def _may_run(self, func, args, kwargs, tensors) -> bool:
        """Integer work always runs (it decides what is touched, and is cheap); floating work
        when its output is small and the budget allows."""
        if not any(t.is_floating_point() for t in tensors):
            return True
        cost = float(sum(t.numel() for t in tensors))
        if torch.Tag.pointwise in func.tags:  # the output is the inputs' broadcast shape
            shape = torch.broadcast_shapes(*(t.shape for t in tensors))
            if math.prod(shape) > self.hybrid.real_limit:
                return False
            return self.hybrid.spend(cost + math.prod(shape))
        try:
            meta_args, meta_kwargs = _to_meta((args, kwargs))
            probe = func(*meta_args, **meta_kwargs)
        except Exception:  # noqa: BLE001 - no meta kernel: data-dependent, run it for real
            return self.hybrid.spend(cost)
        outs = _tensors(probe)
        if any(o.numel() > self.hybrid.real_limit and o.is_floating_point() for o in outs):
            return False
        cost += sum(o.numel() for o in outs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            try:
                cost += float(formula(*meta_args, **meta_kwargs, out_val=probe))
            except Exception:  # noqa: BLE001 - no estimate: count the elements only
                pass
        return self.hybrid.spend(cost)


def _is_view(func) -> bool:
    returns = func._schema.returns
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                 for r in returns)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _to_meta(value):
    """The same tensors as shapes on the meta device (outside every mode)."""
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        return _meta(value)


def _meta(value):
    if isinstance(value, torch.Tensor):
        if value.device.type == "meta":
            return value
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                   device=META) if value.dim() else torch.empty(
            (), dtype=value.dtype, device=META)
    if isinstance(value, list):
        return [_meta(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: _meta(v) for k, v in value.items()}
    return value


def _positions_for_meta(func, args, kwargs):
    """Boolean masks of advanced indexing become positions (real), so the meta op knows the
    result's shape."""
    args = list(args)
    if len(args) > 1 and isinstance(args[1], list | tuple):
        converted = []
        for ix in args[1]:
            if isinstance(ix, torch.Tensor) and ix.dtype in (torch.bool, torch.uint8):
                if ix.device.type == "meta":
                    raise NeedsValues("a boolean mask computed from a large tensor indexes")
                converted.extend(ix.nonzero().unbind(1))
            else:
                converted.append(ix)
        args[1] = converted
    return tuple(args), kwargs


def _mutated(func, args, kwargs) -> list[torch.Tensor]:
    out = []
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        value = args[i] if i < len(args) and not a.kwarg_only else kwargs.get(a.name)
        out += _tensors(value)
    return out


def _keep_inplace_identity(func, args, kwargs, out):
    """An in-place op returns its (real, now stale) self, not the meta stand-in."""
    returns = func._schema.returns
    if len(returns) == 1 and returns[0].alias_info is not None and returns[0].alias_info.is_write:
        mutated = _mutated(func, args, kwargs)
        if mutated:
            return mutated[0]
    return out
