"""Anti-cheat guards that need no GPU: patched functions, side threads, tensor subclasses."""

from __future__ import annotations

import inspect
import sys
import threading
import time
import types

import torch

_TIMING_MODULES = (time,)
_TENSOR_METHODS = ("__sub__", "__eq__", "__ne__", "sub", "abs", "max", "min", "all", "any", "to",
                   "float", "double", "clone", "copy_", "item", "tolist", "data_ptr", "equal",
                   "isnan", "isinf", "isfinite", "contiguous", "view", "reshape", "sum", "norm",
                   "__torch_function__", "__torch_dispatch__")
_TORCH_FUNCTIONS = ("allclose", "isclose", "equal", "isnan", "isinf", "isfinite", "abs", "max",
                    "nonzero", "manual_seed", "randn", "rand", "randint", "empty", "empty_like")


class IdentityGuard:
    """Snapshots the functions the evaluator relies on; reports any that were replaced."""

    def __init__(self, evaluator_modules: list[types.ModuleType], extra: dict[str, object]):
        self._modules = evaluator_modules
        self._extra = extra
        self._snapshot = self._collect()

    def _collect(self) -> dict[str, object]:
        items: dict[str, object] = dict(self._extra)
        for module in _TIMING_MODULES:
            for name in ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
                         "monotonic_ns", "process_time", "sleep"):
                items[f"{module.__name__}.{name}"] = getattr(module, name, None)
        for name in _TENSOR_METHODS:
            items[f"torch.Tensor.{name}"] = _static(torch.Tensor, name)
        for name in _TORCH_FUNCTIONS:
            items[f"torch.{name}"] = getattr(torch, name, None)
        items["torch.testing.assert_close"] = torch.testing.assert_close
        items["torch.linalg.vector_norm"] = torch.linalg.vector_norm
        items["torch.nn.Module.__call__"] = _static(torch.nn.Module, "__call__")
        items["torch.nn.Module._call_impl"] = _static(torch.nn.Module, "_call_impl")
        if torch.cuda.is_available():
            for name in ("record", "elapsed_time", "synchronize", "query", "wait"):
                items[f"torch.cuda.Event.{name}"] = _static(torch.cuda.Event, name)
            for name in ("synchronize", "current_stream", "Event", "graph", "CUDAGraph"):
                items[f"torch.cuda.{name}"] = getattr(torch.cuda, name)
            items["torch.cuda.CUDAGraph.replay"] = _static(torch.cuda.CUDAGraph, "replay")
        for module in self._modules:
            for name, value in vars(module).items():
                if callable(value) and not name.startswith("__"):
                    items[f"{module.__name__}.{name}"] = value
        return items

    def changed(self) -> list[str]:
        now = self._collect()
        return sorted(name for name, value in self._snapshot.items() if now.get(name) is not value)


def _static(owner, name: str):
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        return None


def live_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.is_alive() and t.ident is not None}


def new_threads(before: set[int]) -> list[str]:
    return [t.name for t in threading.enumerate()
            if t.is_alive() and t.ident not in before]


def subclass_outputs(flat: dict[str, object]) -> list[str]:
    """Outputs that are not plain tensors: subclasses and lazy wrappers that compute on access."""
    return [f"{name} ({type(value).__module__}.{type(value).__qualname__})"
            for name, value in flat.items()
            if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor]


def module_of(name: str) -> types.ModuleType:
    return sys.modules[name]
