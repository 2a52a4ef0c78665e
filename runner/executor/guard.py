"""What the executor watches for while candidate code runs beside it: replaced functions (objects,
methods or code objects), threads left running, torch modes left active, outputs still changing.

These guards live in the candidate's process, so a determined candidate can blind them; they
report, the judge decides, and the checks that must hold against a hostile candidate (correctness,
coverage, taint and ghost replays, the judge's own clocks) do not depend on them.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
import time
import types

import torch

_CLOCKS = ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
           "process_time", "process_time_ns", "thread_time", "thread_time_ns", "sleep")
_TENSOR_METHODS = ("__sub__", "__eq__", "__ne__", "sub", "abs", "max", "min", "all", "any", "to",
                   "float", "double", "clone", "copy_", "item", "tolist", "data_ptr", "equal",
                   "isnan", "isinf", "isfinite", "contiguous", "view", "reshape", "sum", "norm",
                   "cpu", "numpy", "untyped_storage", "__torch_function__",
                   "__torch_dispatch__")
_TORCH_FUNCTIONS = ("equal", "isnan", "isinf", "isfinite", "abs", "max", "nonzero", "randperm",
                    "rand", "empty", "empty_like", "frombuffer")


class IdentityGuard:
    """Snapshots the functions the executor relies on, and their code; reports replacements."""

    def __init__(self, modules: list[types.ModuleType], objects: dict[str, object]):
        self._modules = modules
        self._objects = objects
        self._snapshot = self._collect()

    def _collect(self) -> dict[str, tuple]:
        items: dict[str, object] = {}
        for name in _CLOCKS:
            items[f"time.{name}"] = getattr(time, name, None)
        for name in _TENSOR_METHODS:
            items[f"torch.Tensor.{name}"] = _static(torch.Tensor, name)
        for name in _TORCH_FUNCTIONS:
            items[f"torch.{name}"] = getattr(torch, name, None)
        items["torch.nn.Module.__call__"] = _static(torch.nn.Module, "__call__")
        items["torch.nn.Module._call_impl"] = _static(torch.nn.Module, "_call_impl")
        if torch.cuda.is_available():
            for name in ("record", "elapsed_time", "synchronize", "query", "wait"):
                items[f"torch.cuda.Event.{name}"] = _static(torch.cuda.Event, name)
            for name in ("synchronize", "current_stream", "Event", "graph", "CUDAGraph"):
                items[f"torch.cuda.{name}"] = getattr(torch.cuda, name)
            items["torch.cuda.CUDAGraph.replay"] = _static(torch.cuda.CUDAGraph, "replay")
        for module in self._modules:
            items.update(_module_functions(module))
        for label, obj in self._objects.items():
            for name, value in vars(obj).items():
                if callable(value):
                    items[f"{label}.{name}"] = value
        return {name: _fingerprint(value) for name, value in items.items()}

    def changed(self) -> list[str]:
        now = self._collect()
        return sorted(name for name, before in self._snapshot.items()
                      if not _same(before, now.get(name)))


def _module_functions(module: types.ModuleType) -> dict[str, object]:
    """Every function of a module and every method of the classes it defines."""
    items: dict[str, object] = {}
    for name, value in vars(module).items():
        if name.startswith("__"):
            continue
        if inspect.isclass(value) and value.__module__ == module.__name__:
            for attr, member in vars(value).items():
                if callable(member) or isinstance(member, staticmethod | classmethod):
                    items[f"{module.__name__}.{name}.{attr}"] = member
        elif callable(value):
            items[f"{module.__name__}.{name}"] = value
    return items


def _fingerprint(value) -> tuple:
    """Identity of the object and of its code: swapping `__code__` keeps the first, not this."""
    func = getattr(value, "__func__", value)
    code = getattr(func, "__code__", None)
    digest = None
    if isinstance(code, types.CodeType):
        digest = hashlib.blake2b(code.co_code + repr(code.co_consts).encode(),
                                 digest_size=16).hexdigest()
    return (value, code, digest)


def _same(before: tuple, now: tuple | None) -> bool:
    return now is not None and before[0] is now[0] and before[1] is now[1] and \
        before[2] == now[2]


def _static(owner, name: str):
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        return None


def live_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.is_alive() and t.ident is not None}


def new_threads(before: set[int]) -> list[str]:
    return [t.name for t in threading.enumerate() if t.is_alive() and t.ident not in before]


def mode_depths() -> tuple[int, int]:
    """(torch function modes, torch dispatch modes) currently pushed."""
    return torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack()
