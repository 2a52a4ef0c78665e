"""Who did the work: the candidate's own kernels, or PyTorch and its libraries?

`KernelTracker` hooks every Triton launch (compiled or interpreted), every autotuner and heuristics
wrapper, and every function of a C++/CUDA extension the candidate builds. Per call it records each
launch with the storages of its tensor arguments, times the host CPU spent inside own launches, and
can replay a call three ways: *ghost* (own kernels do nothing), *taint* (while an own kernel runs,
every storage derived from the op's inputs holds other values; outside own kernels the real values
are back) and *mirror* (the other way round: other values everywhere but inside own kernels).
`DispatchRecorder` is a TorchDispatchMode that records the aten compute ops run outside own kernels
and follows provenance: which storages derive from which inputs, which from own launches. Together
they say whether the outputs came out of own kernels fed by the inputs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import flop_registry

from ..contract.protocol import ComputeRecord, LaunchRecord

# Captured before any candidate code runs.
_process_ns = time.process_time_ns
_getrusage = resource.getrusage

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
    "constant_pad_nd", "pad",
})

# Glue that allocates: its output holds no data of its arguments (empty_like(x) is not x).
ALLOCATING_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "scalar_tensor", "arange", "empty_permuted",
})

# Same-size integer views, to compare floating storages bit for bit.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def storage_key(t: torch.Tensor) -> int:
    """The base address of a tensor's storage (0 for an empty one)."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def peak_class(dtype: torch.dtype) -> str:
    """Which peak-table entry bounds arithmetic in this dtype (the judge's table has the rates)."""
    if dtype in (torch.bfloat16, torch.float16):
        return "bf16"
    if "float8" in str(dtype):
        return "fp8"
    if dtype in (torch.int8, torch.uint8):
        return "int8"
    if dtype == torch.float64:
        return "fp64"
    return "fp32"


@dataclass
class Provenance:
    """Per call: the input names each storage derives from, and the storages own kernels made."""

    origins: dict[int, frozenset[str]] = field(default_factory=dict)
    tensors: dict[int, torch.Tensor] = field(default_factory=dict)  # one tensor per derived storage
    own_made: set[int] = field(default_factory=set)  # written by own launches (or glue of those)
    inputs_read: set[str] = field(default_factory=set)
    # input-derived storages an own launch got: (bytes before, the storage), compared at the end
    # of the call (a comparison now would synchronize the device inside the candidate's forward)
    pending: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    glue_of_pending: dict[int, set[int]] = field(default_factory=dict)

    def root(self, name: str, t: torch.Tensor) -> None:
        key = storage_key(t)
        if key:
            self.origins[key] = self.origins.get(key, frozenset()) | {name}
            self.tensors.setdefault(key, t)

    def propagate(self, args, out, glue: bool, keep_own: bool = False) -> None:
        """Outputs of a tracked op inherit its inputs' origins; glue of own-made storages is
        own-made too. `keep_own`: own launches inside the op (a custom-op wrapper) made them.
        `args` is () for an allocation: nothing flows into a fresh buffer."""
        keys = [storage_key(t) for t in _tensors(args)]
        origin = frozenset().union(*(self.origins.get(k, frozenset()) for k in keys))
        from_own = glue and any(k in self.own_made for k in keys)
        from_pending = {k for k in keys if k in self.pending} if glue else set()
        for t in _tensors(out):
            key = storage_key(t)
            if not key or key in keys:  # in place or a view: the storage keeps its history too
                if key and origin:
                    self.origins[key] = self.origins.get(key, frozenset()) | origin
                continue
            if origin:
                self.origins[key] = origin
                self.tensors[key] = t
            else:
                self.origins.pop(key, None)
                self.tensors.pop(key, None)
            if from_own:
                self.own_made.add(key)
            elif not keep_own:
                self.own_made.discard(key)
            if from_pending:
                self.glue_of_pending[key] = from_pending

    def launched(self, tensors: list[torch.Tensor], run, bookkeeping=contextlib.nullcontext):
        """Runs an own launch: its arguments that derive from inputs were read; a storage it
        wrote (any fresh buffer, or an input-derived one whose bytes changed) is own-made.
        `bookkeeping()` brackets the comparisons (the device profile leaves them out)."""
        for t in tensors:
            key = storage_key(t)
            origin = self.origins.get(key)
            if origin:
                self.inputs_read |= {n for n in origin if not n.startswith("param:")}
                view = _whole_bytes(t)
                if key not in self.pending and view is not None:
                    with bookkeeping():
                        self.pending[key] = (view.clone(), view)
            elif key:
                self.own_made.add(key)
        return run()

    def settle(self) -> None:
        """After the call: input-derived storages whose bytes changed were written by an own
        launch (an in-place update), and so is glue made of them."""
        changed = {key for key, (old, view) in self.pending.items() if not torch.equal(old, view)}
        self.own_made |= changed
        self.own_made |= {key for key, sources in self.glue_of_pending.items()
                          if sources & changed}
        self.pending.clear()


class _Taint:
    """While one own kernel runs, input-derived floating storages hold shuffled, rescaled values;
    afterwards every element the kernel did not overwrite gets its real value back."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.views = [_whole_storage(t) for t in tensors if t.is_floating_point()]
        self.views = [v for v in self.views if v is not None and v.numel() > 0]
        self.saved: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def __enter__(self):
        for view in self.views:
            real = view.clone()
            order = torch.randperm(view.numel(), device=view.device)
            scale = torch.rand(view.numel(), device=view.device) + 0.5
            poison = (real[order].float() * scale).to(view.dtype)
            view.copy_(poison)
            self.saved.append((view, real, poison))

    def __exit__(self, *exc):
        for view, real, poison in self.saved:
            bits = _BITS[view.element_size()]
            untouched = view.view(bits) == poison.view(bits)
            view[untouched] = real[untouched]
        self.saved.clear()


class _Mirror:
    """The taint turned around, so a kernel cannot tell the two apart by comparing what its own
    kernel reads with what the host reads: for the whole call the floating inputs hold their values
    shuffled, and only while an own kernel runs do they, and the storages PyTorch ops made from
    them, hold real ones (those ops run a second time, on the real values). An honest kernel
    computes the right output; one computed out of the dispatcher's sight (numpy, ctypes, a
    thread) is computed from the shuffled values."""

    def __init__(self):
        self.real: dict[int, torch.Tensor] = {}  # storage key -> its bytes with real values
        self.drawn: dict[int, torch.Tensor] = {}  # input storages: key -> bytes as drawn
        self.live: dict[int, torch.Tensor] = {}  # every storage with real values: its bytes
        self.handed: dict[int, torch.Tensor] = {}  # storages own kernels got: key -> bytes

    def poison(self, tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            key, view = storage_key(t), _whole_bytes(t)
            if not t.is_floating_point() or view is None or key in self.real:
                continue
            self.real[key] = view.clone()
            self.drawn[key] = self.real[key].clone()
            self.live[key] = view
            elements = _whole_storage(t)
            elements.copy_(elements[torch.randperm(elements.numel(), device=t.device)])

    def follow(self, func, args, kwargs, out) -> None:
        """An op ran on the shuffled values: the same op on the real ones gives the real
        values of what it made or changed (dropped where it cannot run twice)."""
        if not any(storage_key(t) in self.real for t in _tensors((args, kwargs))):
            return
        # an op that writes an argument writes a copy of it here, never the live storage
        copies: dict[int, torch.Tensor] = {}
        writes = func._schema.is_mutable
        try:
            real_args, real_kwargs = tree_map(lambda v: self._real_view(v, writes, copies),
                                              (args, kwargs))
            real_out = func(*real_args, **real_kwargs)
        except Exception:  # noqa: BLE001 - what cannot be replayed keeps its shuffled values
            for t in _tensors(out) + (_tensors((args, kwargs)) if writes else []):
                self.real.pop(storage_key(t), None)
            return
        self.real.update(copies)
        for t in _tensors((args, kwargs)):
            if storage_key(t) in copies:
                self.live.setdefault(storage_key(t), _whole_bytes(t))
        for made, real in zip(_tensors(out), _tensors(real_out), strict=False):
            key = storage_key(made)
            if key and key not in self.real and made.untyped_storage().nbytes() == \
                    real.untyped_storage().nbytes():
                self.real[key] = _whole_bytes(real)
                self.live[key] = _whole_bytes(made)

    def _real_view(self, value, writes: bool, copies: dict):
        if not isinstance(value, torch.Tensor):
            return value
        key = storage_key(value)
        real = self.real.get(key)
        if real is None and writes and key and _whole_bytes(value) is not None:
            real = copies.setdefault(key, _whole_bytes(value).clone())
        if real is None:
            return value
        return torch.empty(0, dtype=value.dtype, device=value.device).set_(
            real.untyped_storage(), value.storage_offset(), value.size(), value.stride())

    @contextlib.contextmanager
    def handing(self, tensors: list[torch.Tensor]):
        """Real values in every storage that has them while an own kernel runs (its arguments,
        and what it reaches otherwise, say through a table of pointers); afterwards what it
        did not write is shuffled again, and what it wrote is real in both."""
        for t in _unique_storages(tensors):
            if storage_key(t) in self.real:
                self.handed.setdefault(storage_key(t), _whole_bytes(t))
        swapped = []
        for key, view in self.live.items():
            if key in self.real:
                swapped.append((key, view, view.clone()))
                view.copy_(self.real[key])
        try:
            yield
        finally:
            for key, view, shuffled in swapped:
                untouched = view == self.real[key]
                self.real[key] = view.clone()
                view[untouched] = shuffled[untouched]

    def finish(self) -> None:
        """After forward: the inputs, and the storages own kernels were handed, hold real values
        again (with what own kernels wrote into them); everything else keeps what it computed."""
        for key, view in self.handed.items():
            if key in self.real and key not in self.drawn:
                view.copy_(self.real[key])
        for key, drawn in self.drawn.items():
            self.live[key].copy_(self.real.get(key, drawn))


def _whole_bytes(t: torch.Tensor) -> torch.Tensor | None:
    storage = t.untyped_storage()
    if storage.nbytes() == 0:
        return None
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0,
                                                                  (storage.nbytes(),))


def _whole_storage(t: torch.Tensor) -> torch.Tensor | None:
    storage = t.untyped_storage()
    count = storage.nbytes() // t.element_size()
    if count == 0:
        return None
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (count,))


@dataclass
class CallState:
    launches: list[LaunchRecord] = field(default_factory=list)
    provenance: Provenance = field(default_factory=Provenance)
    own_cpu_ns: int = 0
    own_children_ns: int = 0
    replay: str = "normal"
    recording: bool = False  # inside a judged call; timing repetitions only count launches
    forks: int = 0  # os.fork() calls while this call ran (Python's at-fork hook)
    mirror: _Mirror | None = None  # the mirror replay's values
    host_read_bytes: int = 0  # floating tensor data read to the host outside own launches


def unsynced_pdl(kwargs: dict, compiled) -> bool:
    """A Triton launch with programmatic dependent launch whose compiled code never executes
    griddepcontrol.wait: it may start, and read its inputs, before the kernel before it has
    finished writing them, and back-to-back calls then overlap in a timed graph. Unknown (False)
    without compiled code (the interpreter)."""
    metadata = getattr(compiled, "metadata", None)
    if not (kwargs.get("launch_pdl") or getattr(metadata, "launch_pdl", False)):
        return False
    asm = getattr(compiled, "asm", None)
    ptx = asm.get("ptx") if isinstance(asm, dict) else None
    return isinstance(ptx, str) and "griddepcontrol.wait" not in ptx


class KernelTracker:
    """Hooks Triton launches and extension calls; classifies them by source file."""

    def __init__(self, own_roots: list[Path], check_triton=None):
        self.own_roots = [Path(r).resolve() for r in own_roots]
        self.call = CallState()
        self.extension_kernels: set[str] = set()
        self.depth = 0  # > 0 while an own kernel (or its autotuner) runs
        self.check_triton = check_triton  # CPU: compile each own kernel before interpreting it
        self.launch_count = 0  # own launches since the executor started (timing reads it)
        self.bookkeeping = contextlib.nullcontext  # the device profile's marker for our own work
        self._own_files: dict[str, bool] = {}
        self.reading = False  # inside a hooked host read (numpy, __array__, tolist)

    # -- ownership -----------------------------------------------------------------------------
    def is_own_file(self, filename: str) -> bool:
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
        return {launch.name for launch in self.call.launches if launch.own} | \
            self.extension_kernels

    def begin(self, replay: str, roots: dict[str, torch.Tensor]) -> CallState:
        self.call = CallState(replay=replay, recording=True)
        for name, tensor in roots.items():
            self.call.provenance.root(name, tensor)
        if replay == "mirror":
            self.call.mirror = _Mirror()
            self.call.mirror.poison(list(roots.values()))
        return self.call

    # -- what happens at an own launch ---------------------------------------------------------
    @contextlib.contextmanager
    def own_region(self):
        """Host time inside own launches, counted once for nested wrappers (autotuner -> jit).
        All threads count: the interpreter's tl.dot runs in numpy's BLAS threads."""
        self.depth += 1
        outer = self.depth == 1
        if outer:
            cpu0, children0 = _process_ns(), _children_ns()
        try:
            yield
        finally:
            self.depth -= 1
            if outer:
                self.call.own_cpu_ns += _process_ns() - cpu0
                self.call.own_children_ns += _children_ns() - children0

    def end(self) -> None:
        self.call.recording = False
        if self.call.mirror is not None:
            self.call.mirror.finish()

    def forked(self) -> None:
        """os.register_at_fork hook: compilers start through subprocess (no fork hook), so a
        fork is the candidate's own."""
        if self.call.recording:
            self.call.forks += 1

    def launch(self, name: str, filename: str, own: bool, args, kwargs, run, check=None):
        if not self.call.recording:  # a timed repetition: count, and nothing else
            self.launch_count += own
            return run()
        tensors = _launch_tensors(args, kwargs)
        keys = list(dict.fromkeys(k for k in (storage_key(t) for t in tensors) if k))
        nbytes = sum(t.untyped_storage().nbytes() for t in _unique_storages(tensors))
        index = len(self.call.launches)
        self.call.launches.append(LaunchRecord(name, filename, own, keys, nbytes))
        if not own:
            return run()
        run = self._noting_unsynced_pdl(run, kwargs, index)
        self.launch_count += 1
        if self.call.replay == "ghost":
            self.call.provenance.launched(tensors, lambda: None)
            return None
        with self.own_region():
            if check is not None:
                check()
            if self.call.mirror is not None:
                mirror = self.call.mirror

                def run_mirrored():
                    with mirror.handing(tensors):
                        return run()
                return self.call.provenance.launched(tensors, run_mirrored, self.bookkeeping)
            if self.call.replay == "taint":
                taint = _Taint(list(self.call.provenance.tensors.values()))

                def run_tainted():
                    with taint:
                        return run()
                return self.call.provenance.launched(tensors, run_tainted, self.bookkeeping)
            return self.call.provenance.launched(tensors, run, self.bookkeeping)

    def _noting_unsynced_pdl(self, run, kwargs: dict, index: int):
        """`run`, marking the launch record at `index` when what it launched is a PDL launch
        that never waits (`unsynced_pdl`)."""
        launches = self.call.launches

        def run_and_note():
            compiled = run()
            if unsynced_pdl(kwargs, compiled):
                launches[index] = dataclasses.replace(launches[index], unsynced_pdl=True)
            return compiled
        return run_and_note

    # -- hooks ---------------------------------------------------------------------------------
    def install(self) -> None:
        self._hook_triton()
        self._hook_extensions()
        self._hook_host_reads()

    def host_read(self, t: torch.Tensor) -> None:
        """Floating tensor data the forward turned into host values outside own launches."""
        if self.call.recording and self.depth == 0 and t.is_floating_point():
            self.call.host_read_bytes += t.numel() * t.element_size()

    def _hook_host_reads(self) -> None:
        """numpy arrays and Python lists of tensor data; on a GPU the dispatcher also sees the
        copies to the host (DispatchRecorder). A read through a raw pointer is not seen."""
        tracker = self
        for name in ("numpy", "__array__", "tolist"):
            original = getattr(torch.Tensor, name)

            def reading(t, *args, _original=original, **kwargs):
                if tracker.reading:  # numpy() reading through __array__: one read
                    return _original(t, *args, **kwargs)
                tracker.host_read(t)
                tracker.reading = True
                try:
                    return _original(t, *args, **kwargs)
                finally:
                    tracker.reading = False

            reading.__name__ = reading.__qualname__ = name
            setattr(torch.Tensor, name, reading)

    def _hook_triton(self) -> None:
        try:
            from triton.runtime.jit import JITFunction
        except ImportError:
            return
        launchers = [JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction
            launchers.append(InterpretedFunction)
        except ImportError:
            pass
        for cls in launchers:
            self._wrap_launch(cls)
        try:
            from triton.runtime.autotuner import Autotuner, Heuristics
        except ImportError:
            return
        for cls in (Autotuner, Heuristics):
            self._wrap_tuner(cls)

    def _wrap_launch(self, cls: type) -> None:
        original = cls.run
        tracker = self

        def run(self, *args, grid, warmup, **kwargs):
            if warmup:
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
            fn = self.fn
            code = getattr(fn, "__code__", None)
            filename = code.co_filename if code else ""
            own = tracker.is_own_file(filename)
            check = None
            if own and tracker.check_triton is not None:
                def check():
                    tracker.check_triton(self, args, kwargs)

            def launch():
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)

            return tracker.launch(fn.__name__, filename, own, args, kwargs, launch, check)

        cls.run = run

    def _wrap_tuner(self, cls: type) -> None:
        original = cls.run
        tracker = self

        def run(self, *args, **kwargs):
            if not tracker.is_own_file(_base_filename(self)):
                return original(self, *args, **kwargs)
            with tracker.own_region():  # benchmarking configs is the kernel's own host time
                return original(self, *args, **kwargs)

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

            setattr(cpp_extension, name, loader)


def _children_ns() -> int:
    usage = _getrusage(resource.RUSAGE_CHILDREN)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


def _base_filename(kernel) -> str:
    fn = kernel
    for _ in range(8):  # Autotuner -> Heuristics -> JITFunction -> python function
        inner = getattr(fn, "fn", None)
        if inner is None:
            break
        fn = inner
    code = getattr(fn, "__code__", None)
    return code.co_filename if code else ""


def _tensors(tree) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _launch_tensors(args, kwargs) -> list[torch.Tensor]:
    """Tensor arguments of a launch, including the base of a TMA tensor descriptor."""
    found = []
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(getattr(value, "base", None), torch.Tensor):
            found.append(value.base)
    return found


def _unique_storages(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    seen, unique = set(), []
    for t in tensors:
        key = storage_key(t)
        if key and key not in seen:
            seen.add(key)
            unique.append(t)
    return unique


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
            return tracker.launch(name, "<extension>", True, args, kwargs,
                                  lambda: value(*args, **kwargs))

        return call


class DispatchRecorder(TorchDispatchMode):
    """Records aten compute ops run outside own kernels and follows storage provenance."""

    def __init__(self, tracker: KernelTracker, marker=None):
        super().__init__()
        self.tracker = tracker
        self.marker = marker  # profile mode: brackets every op with marker kernels
        self.compute: list[ComputeRecord] = []
        self.active = False

    def __enter__(self):
        self.active = True
        return super().__enter__()

    def __exit__(self, *exc):
        self.active = False
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.tracker.depth > 0:  # the interpreter's own tensor traffic inside an own kernel
            return func(*args, **kwargs)
        name = func._overloadpacket.__name__
        if func.namespace not in ("aten", "prims"):
            return self._custom_op(func, name, args, kwargs)
        glue = name in GLUE_OPS
        out = self._run(func, args, kwargs, "glue" if glue else "compute")
        if name in ("_to_copy", "copy_", "copy"):
            self._note_copy_to_host(args, out)
        if not glue:
            self.compute.append(_compute_record(func, name, args, kwargs, out))
        flows = () if name in ALLOCATING_OPS else (args, kwargs)
        self.tracker.call.provenance.propagate(flows, out, glue)
        if self.tracker.call.mirror is not None and flows:
            self.tracker.call.mirror.follow(func, args, kwargs, out)
        return out

    def _note_copy_to_host(self, args, out) -> None:
        if any(t.device.type != "cpu" for t in _tensors(args)):
            for t in _tensors(out):
                if t.device.type == "cpu":
                    self.tracker.host_read(t)

    def _run(self, func, args, kwargs, region: str):
        if self.marker is None:
            return func(*args, **kwargs)
        with self.marker(region):
            return func(*args, **kwargs)

    def _custom_op(self, func, name, args, kwargs):
        """A custom op is the author's wrapper if own kernels ran inside it; otherwise it is
        opaque compute (PyTorch hidden behind torch.library) and counts against the share."""
        before = self.tracker.launch_count
        out = self._run(func, args, kwargs, "wrapper")
        own_inside = self.tracker.launch_count > before
        if not own_inside:
            self.compute.append(_compute_record(func, f"{func.namespace}::{name}", args, kwargs,
                                                out))
        self.tracker.call.provenance.propagate((args, kwargs), out, glue=own_inside,
                                               keep_own=own_inside)
        return out


def _compute_record(func, name, args, kwargs, out) -> ComputeRecord:
    flops = 0.0
    formula = flop_registry.get(func._overloadpacket)
    if formula is not None:
        try:
            flops = float(formula(*args, **kwargs, out_val=out))
        except Exception:  # a formula that cannot handle these arguments counts nothing
            flops = 0.0
    tensors = _tensors((args, kwargs))
    nbytes = float(sum(t.numel() * t.element_size() for t in tensors + _tensors(out)))
    dtype = tensors[0].dtype if tensors else torch.float32
    return ComputeRecord(name=name, flops=flops, bytes=nbytes, peak=peak_class(dtype))
