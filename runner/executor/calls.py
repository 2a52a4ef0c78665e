"""One forward of the candidate with every recorder on: the single path of every judged call.

`run_call` returns the raw output and a `CallReport`: launches with the storages they touched,
aten compute outside own kernels, provenance (which outputs own kernels made, which inputs reached
them), host CPU time inside and outside own launches, and what the guards saw. `encode_outputs`
turns outputs into wire data with every torch mode and subclass hook disabled, so a lazy result
cannot compute itself while it is being copied out.
"""

from __future__ import annotations

import contextlib
import resource
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import _disable_current_modes, _get_current_dispatch_mode

from ..contract import wire
from ..contract.protocol import CallReport, GuardFlag, HostTime, Raised
from .guard import IdentityGuard, live_threads, mode_depths, new_threads
from .tracking import DispatchRecorder, KernelTracker, storage_key
from .tritoncheck import NotTritonError

_process_ns = time.process_time_ns
_getrusage = resource.getrusage

_COMPILE_ERRORS = ("CompilationError", "OutOfResources", "SyntaxError", "IndentationError",
                   "ImportError", "ModuleNotFoundError", "CalledProcessError", "BuildError",
                   "NotTritonError")
_CUDA_BROKEN = ("CUDA error", "AcceleratorError", "illegal memory access", "device-side assert",
                "unspecified launch failure")


@dataclass
class Session:
    """What the executor holds between calls."""

    device: torch.device
    tracker: KernelTracker
    guard: IdentityGuard | None
    candidate_dir: Path
    mutates: list[str]
    modes: tuple[int, int]  # torch mode stack depths when no call runs
    model_cls: type | None = None
    model: object = None
    # False for a baseline (the reference, eager or compiled): no dispatch mode around its calls.
    # torch.compile runs a function eagerly under any dispatch mode and, once its first call was
    # made under one, never compiles it (torch 2.11; the H200 bench's `compile` column read the
    # same times as `eager`), so a recorded compiled baseline is an eager one.
    record_dispatch: bool = True
    inputs: dict = field(default_factory=dict)  # the last call's inputs (refill / repeat)
    previous: list = field(default_factory=list)  # the last call's outputs, kept alive

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def run_call(session: Session, replay: str, profiler=None) -> tuple[object, CallReport]:
    """One forward; with a `profiler` (profile.DeviceProfiler) only the forward itself runs in
    its window, with every aten op and the executor's own bookkeeping in marked regions."""
    tracker = session.tracker
    inputs = session.inputs
    call = tracker.begin(replay, _roots(session.model, inputs))
    recorder = DispatchRecorder(tracker, profiler.region if profiler else None) \
        if session.record_dispatch else None
    tracker.bookkeeping = profiler.bookkeeping if profiler else contextlib.nullcontext
    window = profiler.window() if profiler else contextlib.nullcontext()
    flags = _mode_flags(session)
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    threads = live_threads()
    cpu0, children0 = _process_ns(), _children_ns()
    out, raised = None, None
    try:
        with window, recorder or contextlib.nullcontext(), torch.no_grad():
            out = session.model(**inputs)
            if recorder is not None and _get_current_dispatch_mode() is not recorder:
                flags.append(GuardFlag("evaluator_tampered", "the dispatch recorder was removed "
                                       "from the mode stack during forward"))
    except BaseException as exc:  # noqa: BLE001 - whatever the candidate raised is its result
        raised = describe(exc, session.candidate_dir)
    finally:
        tracker.end()
        tracker.bookkeeping = contextlib.nullcontext
    cpu1, children1 = _process_ns(), _children_ns()
    late = [] if raised else _late_writes(session, out)
    call.provenance.settle()  # after the late-write check: settling synchronizes the device
    flags += _after_flags(session, threads, late)
    if call.forks:
        flags.append(GuardFlag("child_process", f"forward forked {call.forks} child process(es)"))
    host = HostTime(total_ms=(cpu1 - cpu0) / 1e6, own_ms=call.own_cpu_ns / 1e6,
                    children_ms=max(0, children1 - children0 - call.own_children_ns) / 1e6,
                    read_bytes=call.host_read_bytes)
    flat = flatten(out) if raised is None else {}
    report = CallReport(
        raised=raised, launches=list(call.launches),
        compute=list(recorder.compute) if recorder is not None else [], host=host,
        flags=flags, touched_inputs=[k for k, v in before.items() if not same_bytes(v, inputs[k])],
        output_storages={k: storage_key(v) for k, v in flat.items()
                         if isinstance(v, torch.Tensor)},
        input_storages={k: storage_key(v) for k, v in inputs.items()
                        if isinstance(v, torch.Tensor)},
        previous_storages=[storage_key(t) for t in session.previous],
        own_written=_own_written(session, flat, call.provenance.own_made),
        inputs_read=sorted(call.provenance.inputs_read),
        implementation=implementation_note(session.model))
    session.previous = [v for v in flat.values() if isinstance(v, torch.Tensor)]
    return out, report


IMPLEMENTATION_NOTE_CHARS = 300


def implementation_note(model) -> str | None:
    """`model.atrex_implementation` as a short string, or None where it is not a string."""
    try:
        note = getattr(model, "atrex_implementation", None)
    except Exception:  # noqa: BLE001 - a property that raises says nothing
        return None
    if not isinstance(note, str) or not note.strip():
        return None
    return " ".join(note.split())[:IMPLEMENTATION_NOTE_CHARS]


def _own_written(session: Session, flat: dict, own_made: set[int]) -> list[str]:
    """Outputs (and declared in-place inputs, as "input:<name>") whose storage own kernels made."""
    named = {k: v for k, v in flat.items() if isinstance(v, torch.Tensor)}
    named.update({f"input:{n}": session.inputs[n] for n in session.mutates
                  if isinstance(session.inputs.get(n), torch.Tensor)})
    return [k for k, v in named.items() if storage_key(v) in own_made]


def _roots(model, inputs: dict) -> dict[str, torch.Tensor]:
    roots = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    if isinstance(model, torch.nn.Module):
        for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
            roots[f"param:{name}"] = tensor
    return roots


def _mode_flags(session: Session) -> list[GuardFlag]:
    depths = mode_depths()
    if depths == session.modes:
        return []
    return [GuardFlag("mode_active", f"torch modes were left active outside any call (function "
                      f"modes {depths[0]}, dispatch modes {depths[1]}; expected "
                      f"{session.modes[0]} and {session.modes[1]}): something intercepts the "
                      "evaluator's own tensor operations")]


def _after_flags(session: Session, threads: set[int], late: list[str]) -> list[GuardFlag]:
    flags = []
    spawned = new_threads(threads)
    if spawned:
        flags.append(GuardFlag("side_thread", f"forward returned while its threads {spawned} "
                               "were still running"))
    if late:
        flags.append(GuardFlag("lazy_output", f"outputs {late} were still being written after "
                               "forward returned"))
    changed = session.guard.changed() if session.guard else []
    if changed:
        flags.append(GuardFlag("patched_function", "the candidate replaced functions the "
                               f"evaluator relies on: {', '.join(changed[:6])}"))
    return flags


def _late_writes(session: Session, out) -> list[str]:
    """Outputs whose bytes still change after forward returned (a side stream, a thread)."""
    flat = {k: v for k, v in flatten(out).items() if type(v) is torch.Tensor}
    with _plain():
        early = {k: v.clone() for k, v in flat.items()}
        session.synchronize()
        return [k for k, v in flat.items() if not same_bytes(early[k], v)]


def flatten(out) -> dict[str, object]:
    """Name every tensor of an output: a tensor, a dict of tensors, or a tuple/list of them."""
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items()}
    if isinstance(out, tuple | list):
        return {str(i): v for i, v in enumerate(out)}
    return {"out": out}


@contextlib.contextmanager
def _plain():
    """No torch function or dispatch mode, no subclass hook: our own tensor operations only."""
    with torch._C.DisableTorchFunction(), _disable_current_modes():
        yield


def encode_outputs(out, mutated: dict, blobs: list) -> dict:
    with _plain():
        return {"outputs": wire.encode_value(out, blobs),
                "mutated": wire.encode_value(mutated, blobs)}


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-exact equality (NaN-safe)."""
    with _plain():
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.numel() == 0:
            return True
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                           b.contiguous().reshape(-1).view(torch.uint8))


def _children_ns() -> int:
    usage = _getrusage(resource.RUSAGE_CHILDREN)
    return int((usage.ru_utime + usage.ru_stime) * 1e9)


def describe(exc: BaseException, candidate_dir: Path, compile_time: bool = False) -> Raised:
    name = type(exc).__name__
    text = str(exc).strip()
    message = f"{name}: {text.splitlines()[0] if text else ''}"[:600]
    if isinstance(exc, torch.OutOfMemoryError):
        message = "out of GPU memory: " + message
    file, line = _location(exc, candidate_dir)
    compile_error = compile_time or name in _COMPILE_ERRORS or "triton.compiler" in (
        type(exc).__module__ or "") or _in_triton_compiler(exc)
    return Raised(type=name, message=message, file=file, line=line, compile=compile_error,
                  cuda_broken=any(marker in text for marker in _CUDA_BROKEN),
                  out_of_memory=isinstance(exc, torch.OutOfMemoryError))


def _in_triton_compiler(exc: BaseException) -> bool:
    """Raised while Triton compiled a kernel: in its code generator, or while its JIT walked the
    kernel's source for dependencies (`Unsupported function referenced` is a RuntimeError)."""
    for frame in traceback.extract_tb(exc.__traceback__):
        path = frame.filename.replace("\\", "/")
        if "/triton/compiler/" in path:
            return True
        if path.endswith("/triton/runtime/jit.py") and frame.name.startswith("visit_"):
            return True
    return False


def _location(exc: BaseException, root: Path) -> tuple[str | None, int | None]:
    if isinstance(exc, NotTritonError):
        file, line = exc.location
        return _relative(file, root), line
    if isinstance(exc, SyntaxError) and exc.filename:
        return _relative(exc.filename, root), exc.lineno
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.startswith(str(root)):
            return _relative(frame.filename, root), frame.lineno
    return None, None


def _relative(file: str | None, root: Path) -> str | None:
    if not file:
        return None
    try:
        return str(Path(file).resolve().relative_to(root.resolve()))
    except ValueError:
        return Path(file).name
