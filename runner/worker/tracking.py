"""Who did the work: the candidate's own kernels, or PyTorch and its libraries?

`KernelTracker` hooks every Triton launch (compiled or interpreted) and every function of a C++/CUDA
extension the candidate builds, and knows which of them come from the candidate's repository. It
can also turn the own kernels into no-ops for ghost replay. `DispatchRecorder` is a
TorchDispatchMode that records the aten compute ops the candidate runs outside its own kernels,
with an estimate of the work each represents, so the own-kernel share can be computed on any device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from ..dtypes import peak_class

# Allocation, view, copy-for-layout and metadata ops: glue, not the operator's computation.
GLUE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "fill", "fill_", "zero_", "scalar_tensor", "arange", "view", "_unsafe_view", "view_as",
    "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "permute", "transpose", "t",
    "contiguous", "clone", "copy_", "_to_copy", "to", "detach", "alias", "lift_fresh",
    "lift_fresh_copy", "slice", "select", "unsqueeze", "squeeze", "split", "split_with_sizes",
    "chunk", "narrow", "unbind", "set_", "resize_", "cat", "stack", "flatten", "unflatten",
    "movedim", "view_as_real", "view_as_complex", "_local_scalar_dense", "item", "sym_size",
    "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size", "record_stream",
    "_has_compatible_shallow_copy_type", "is_nonzero", "dim", "size", "stride", "numel",
    "_assert_async", "resolve_conj", "resolve_neg", "_conj", "conj", "real", "view_copy",
    "_unsafe_index_put", "diagonal", "unfold", "_foreach_copy_", "copy", "empty_permuted",
})


@dataclass
class KernelLaunch:
    name: str
    file: str
    own: bool


@dataclass
class ComputeOp:
    name: str
    flops: float
    bytes: float
    peak: str  # which peak-table entry bounds its arithmetic


class KernelTracker:
    """Hooks Triton launches and extension calls; classifies them by source file."""

    def __init__(self, own_roots: list[Path]):
        self.own_roots = [Path(r).resolve() for r in own_roots]
        self.launches: list[KernelLaunch] = []
        self.extension_kernels: set[str] = set()
        self.ghost = False
        self.recorder: DispatchRecorder | None = None
        self._originals: list[tuple[type, str, object]] = []
        self._own_files: dict[str, bool] = {}

    # -- ownership -----------------------------------------------------------------------------
    def is_own_file(self, filename: str) -> bool:
        # cached: this runs on every launch, also inside timed repetitions
        known = self._own_files.get(filename)
        if known is None:
            known = self._own_files[filename] = self._resolve_own(filename)
        return known

    def _resolve_own(self, filename: str) -> bool:
        try:
            path = Path(filename).resolve()
        except (OSError, ValueError):
            return False
        if "site-packages" in path.parts or "dist-packages" in path.parts:
            return False
        return any(root == path or root in path.parents for root in self.own_roots)

    def own_kernel_names(self) -> set[str]:
        return {launch.name for launch in self.launches if launch.own} | self.extension_kernels

    def reset(self) -> None:
        self.launches.clear()

    # -- hooks ---------------------------------------------------------------------------------
    def install(self) -> None:
        self._hook_triton()
        self._hook_extensions()

    def _hook_triton(self) -> None:
        try:
            from triton.runtime.jit import JITFunction
        except ImportError:
            return
        classes = [JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        except ImportError:
            pass
        for cls in classes:
            self._wrap_run(cls)

    def _wrap_run(self, cls: type) -> None:
        original = cls.run
        tracker = self

        def run(self, *args, grid, warmup, **kwargs):
            if warmup:
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
            fn = self.fn
            code = getattr(fn, "__code__", None)
            filename = code.co_filename if code else ""
            own = tracker.is_own_file(filename)
            tracker.launches.append(KernelLaunch(fn.__name__, filename, own))
            if own and tracker.ghost:
                return None
            with tracker.suspended(own):
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)

        self._originals.append((cls, "run", original))
        cls.run = run

    def _hook_extensions(self) -> None:
        from torch.utils import cpp_extension

        tracker = self
        for name in ("load_inline", "load"):
            original = getattr(cpp_extension, name)

            def loader(*args, _original=original, **kwargs):
                module = _original(*args, **kwargs)
                sources = _extension_sources(args, kwargs)
                tracker.extension_kernels |= set(re.findall(r"__global__\s+(?:void\s+)?(\w+)",
                                                            sources))
                return _TrackedExtension(module, tracker)

            self._originals.append((cpp_extension, name, original))
            setattr(cpp_extension, name, loader)

    def suspended(self, own: bool):
        return _Suspend(self.recorder if own else None)


def _extension_sources(args, kwargs) -> str:
    chunks = []
    for key in ("cpp_sources", "cuda_sources", "sources"):
        value = kwargs.get(key)
        if value is None:
            continue
        items = [value] if isinstance(value, str) else list(value)
        for item in items:
            path = Path(item)
            is_source_file = path.suffix in (".cu", ".cpp", ".cc", ".cuh") and len(item) < 4096
            if is_source_file and path.is_file():
                chunks.append(path.read_text(errors="replace"))
            else:
                chunks.append(item)
    for arg in args[1:3]:
        if isinstance(arg, str):
            chunks.append(arg)
        elif isinstance(arg, list | tuple):
            chunks.extend(a for a in arg if isinstance(a, str))
    return "\n".join(chunks)


class _TrackedExtension:
    """A proxy for an extension module: every call is an own-kernel launch."""

    def __init__(self, module, tracker: KernelTracker):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_tracker", tracker)

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if not callable(value):
            return value
        tracker = self._tracker

        def call(*args, **kwargs):
            tracker.launches.append(KernelLaunch(f"{name}", "<extension>", True))
            if tracker.ghost:
                return None
            with tracker.suspended(True):
                return value(*args, **kwargs)

        return call


class _Suspend:
    def __init__(self, recorder):
        self.recorder = recorder

    def __enter__(self):
        if self.recorder is not None:
            self.recorder.depth += 1

    def __exit__(self, *exc):
        if self.recorder is not None:
            self.recorder.depth -= 1


class DispatchRecorder(TorchDispatchMode):
    """Records aten compute ops run outside the candidate's own kernels."""

    def __init__(self, own_launches=lambda: 0):
        super().__init__()
        self.depth = 0  # > 0 while an own kernel runs (the interpreter's own tensor traffic)
        self.own_launches = own_launches  # how many own kernels have launched so far
        self.compute: list[ComputeOp] = []
        self.glue: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.depth > 0:
            return func(*args, **kwargs)
        name = func._overloadpacket.__name__
        if func.namespace not in ("aten", "prims"):
            return self._custom_op(func, name, args, kwargs)
        out = func(*args, **kwargs)
        if name in GLUE_OPS:
            self.glue.append(name)
        else:
            self.compute.append(_compute_op(func, name, args, kwargs, out))
        return out

    def _custom_op(self, func, name, args, kwargs):
        """A custom op is the author's wrapper if own kernels ran inside it; otherwise it is
        opaque compute (PyTorch hidden behind torch.library) and counts against the share."""
        before = self.own_launches()
        out = func(*args, **kwargs)
        if self.own_launches() == before:
            self.compute.append(_compute_op(func, f"{func.namespace}::{name}", args, kwargs, out))
        return out


def _compute_op(func, name, args, kwargs, out) -> ComputeOp:
    flops = 0.0
    formula = flop_registry.get(func._overloadpacket)
    if formula is not None:
        try:
            flops = float(formula(*args, **kwargs, out_val=out))
        except Exception:  # a formula that cannot handle these arguments counts nothing
            flops = 0.0
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    nbytes = float(sum(t.numel() * t.element_size() for t in tensors + outs))
    dtype = tensors[0].dtype if tensors else torch.float32
    return ComputeOp(name=name, flops=flops, bytes=nbytes, peak=peak_class(str(dtype)))


@dataclass
class WorkTally:
    """FLOPs by peak class and bytes moved, for roofline floors."""

    flops: dict[str, float] = field(default_factory=dict)
    bytes: float = 0.0

    def add(self, peak: str, flops: float) -> None:
        if flops:
            self.flops[peak] = self.flops.get(peak, 0.0) + flops


def tally_compute(ops: list[ComputeOp]) -> WorkTally:
    tally = WorkTally()
    for op in ops:
        tally.add(op.peak, op.flops)
        tally.bytes += op.bytes
    return tally


class FlopCounter(TorchDispatchMode):
    """Counts FLOPs of a reference run per peak class (bf16 tensor-core FLOPs vs fp32, ...)."""

    def __init__(self):
        super().__init__()
        self.tally = WorkTally()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            tensors = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
            dtype = tensors[0].dtype if tensors else torch.float32
            try:
                self.tally.add(peak_class(str(dtype)), float(formula(*args, **kwargs,
                                                                      out_val=out)))
            except Exception:
                pass
        return out
