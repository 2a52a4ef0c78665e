"""The executor process: load one candidate, then answer the judge's requests until told to exit.

`python -s -m atrex.runner.executor --socket-fd N`: requests and answers are
`atrex.runner.contract` messages on the inherited socket; the candidate's own prints go to
stdout/stderr, which the judge logs. Everything the executor relies on (hooks, guards, clocks) is
set up before the candidate is imported.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from ..contract import graphplan, wire
from ..contract import protocol as p
from ..contract.storage import copy_keeping_aliases
from . import calls, graphcopies, timing
from .calls import Session, describe
from .confine import confine
from .guard import IdentityGuard, mode_depths
from .tracking import KernelTracker

EXIT_CUDA_BROKEN = 3  # the CUDA context is unusable: the judge starts a fresh executor


def main(argv: list[str]) -> int:
    _die_with_parent()
    sock = socket.socket(fileno=int(argv[argv.index("--socket-fd") + 1]))
    header, _ = wire.recv_message(sock)
    if header.get("cmd") != p.LOAD:
        return 2
    session, raised = _load(header, sock)
    _answer(sock, header, {"raised": p.to_wire(raised) if raised else None,
                           "flags": _load_flags(session)})
    if raised is not None:
        return 0
    timer = _Timer(session)
    while True:
        header, blobs = wire.recv_message(sock)
        command = header.get("cmd")
        if command == p.EXIT:
            _answer(sock, header, {})
            return 0
        handler = _HANDLERS.get(command)
        try:
            if handler is None:
                raise ValueError(f"unknown command {command!r}")
            reply, out_blobs = handler(session, timer, header, blobs)
        except BaseException as exc:  # noqa: BLE001 - reported to the judge as data
            raised = describe(exc, session.candidate_dir)
            _answer(sock, header, {"raised": p.to_wire(raised)})
            if raised.cuda_broken:
                return EXIT_CUDA_BROKEN
            continue
        _answer(sock, header, reply, out_blobs)


def _answer(sock: socket.socket, request: dict, reply: dict, blobs: list | None = None) -> None:
    wire.send_message(sock, {"seq": request.get("seq"), **reply}, blobs or [])


def _die_with_parent() -> None:
    """An executor whose judge was killed must not keep running candidate code."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:
        os._exit(1)


# --- load ----------------------------------------------------------------------------------------

def _load(header: dict, sock: socket.socket) -> tuple[Session, p.Raised | None]:
    import torch._dynamo  # noqa: F401 - it rewraps torch.manual_seed on import; before the guard

    device = torch.device(header["device"])
    kernel = Path(header["kernel"])
    if device.type == "cpu":
        from . import interp_bf16, interp_fast
        from .devmap import CudaToCpu

        CudaToCpu().__enter__()  # for the whole life of this process
        _autotune_without_a_gpu()
        interp_bf16.install()  # bfloat16 arithmetic on values, as on the GPU
        interp_fast.install()  # the same results; the suite's sampling kernel 3.7x faster
    check = None
    if device.type == "cpu" and header.get("check_triton", True):
        from .tritoncheck import TritonFrontend

        check = TritonFrontend()
    tracker = KernelTracker([Path(r) for r in header.get("own_roots", [])], check_triton=check)
    tracker.install()
    os.register_at_fork(before=tracker.forked)
    executor_modules = [m for name, m in sys.modules.items() if m and name.startswith(
        ("atrex.runner.executor", "atrex.runner.contract"))]
    session = Session(device=device, tracker=tracker, guard=None, candidate_dir=kernel.parent,
                      mutates=list(header.get("mutates", [])), modes=mode_depths(),
                      record_dispatch=bool(header.get("record_dispatch", True)))
    session.guard = IdentityGuard(executor_modules, {"tracker": tracker})
    if device.type == "cuda":
        torch.cuda.init()  # the driver may load a kernel module, which confined it could not
    done = confine(_writable(header), header.get("unreadable", []),
                   own=[str(kernel.parent), header["root"]])
    abi = done.landlock_abi
    # LOAD's first answer, sent before the candidate is imported, so nothing it runs can change
    # what the judge is told about its confinement
    _answer(sock, header, {"confined": True, "landlock_abi": abi,
                           "hidden_paths": done.hidden_paths})
    print(f"atrex executor: confined (Landlock ABI {abi or 'absent: writes not confined'})",
          file=sys.stderr, flush=True)  # the executor's log, where a GPU stack's refusal shows
    try:
        module = _import(kernel, [kernel.parent, Path(header["root"])])
        session.model_cls = candidate_class(module)
    except BaseException as exc:  # noqa: BLE001 - any import failure is the candidate's
        return session, describe(exc, kernel.parent, compile_time=True)
    return session, None


def _writable(header: dict) -> list[str]:
    """Where the candidate may write: its scratch directory (cwd, HOME, TMPDIR), the compile
    caches the environment names, the GPU's device nodes, and what the judge adds (the compile
    baseline's shared Inductor cache)."""
    named = [os.getcwd(), "/dev", *header.get("writable", [])]
    named += [os.environ[k] for k in ("HOME", "TMPDIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
                                      "TORCHINDUCTOR_CACHE_DIR") if os.environ.get(k)]
    return named


def candidate_class(module):
    """The candidate's model class: `ModelNew` (KernelBench's name, preferred where a file keeps
    the reference `Model` beside it) or `Model`."""
    for name in ("ModelNew", "Model"):
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            return cls
    raise AttributeError(f"{module.__file__} defines neither a class ModelNew nor a class Model")


def _autotune_without_a_gpu() -> None:
    """Triton's autotuner times configs with the GPU driver's benchmarker, which does not exist
    under the interpreter. Here every config runs once (so each is compiled for sm_90 and
    interpreted) and all tie, so the first one is kept: on a CPU machine the configs are checked,
    not ranked."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return

    def bench(kernel_call, quantiles):
        kernel_call()
        return [1.0 for _ in quantiles]

    Autotuner.do_bench = property(lambda self: bench)


def _load_flags(session: Session) -> list[dict]:
    flags = []
    changed = session.guard.changed() if session.guard else []
    if changed:
        flags.append(p.GuardFlag("patched_function", "importing the candidate replaced "
                                 f"functions the evaluator relies on: {', '.join(changed[:6])}"))
    if mode_depths() != session.modes:
        flags.append(p.GuardFlag("mode_active", "importing the candidate left a torch mode "
                                 "active: it would intercept the evaluator's tensor operations"))
    return [p.to_wire(f) for f in flags]


def _import(path: Path, search: list[Path]):
    for entry in search:
        if str(entry) not in sys.path:
            sys.path.insert(0, str(entry))
    spec = importlib.util.spec_from_file_location("atrex_candidate", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["atrex_candidate"] = module
    spec.loader.exec_module(module)
    return module


# --- requests ------------------------------------------------------------------------------------

def _build(session: Session, timer, header: dict, blobs):
    """Model(**init_kwargs), seeded as the reference was, with the reference's state where the
    parameter names and shapes agree (so both compute with the same weights)."""
    torch.manual_seed(0)
    model = session.model_cls(**header.get("init_kwargs", {}))
    if isinstance(model, torch.nn.Module):
        model = model.to(session.device)
        state = wire.decode_value(header["state"], blobs)
        ours = model.state_dict()
        if state.keys() == ours.keys() and all(state[k].shape == ours[k].shape for k in state):
            model.load_state_dict({k: v.to(session.device) for k, v in state.items()})
    session.model = model
    session.inputs, session.previous = {}, []
    timer.reset()
    return {}, []


def _call(session: Session, timer, header: dict, blobs):
    _take_inputs(session, header, blobs)
    out, report = calls.run_call(session, header.get("replay", p.NORMAL))
    return _with_outputs(session, out, report)


def _profile(session: Session, timer, header: dict, blobs):
    from .profile import DeviceProfiler

    _take_inputs(session, header, blobs)
    profiler = DeviceProfiler()
    out, report = calls.run_call(session, p.NORMAL, profiler)
    reply, out_blobs = _with_outputs(session, out, report)
    own = sum(1 for launch in report.launches if launch.own)
    reply["profile"] = p.to_wire(profiler.result(session.tracker.own_kernel_names(), own))
    return reply, out_blobs


def _take_inputs(session: Session, header: dict, blobs) -> None:
    reuse = header.get("reuse", p.FRESH)
    if reuse == p.REPEAT:
        return
    values = _received_inputs(header, blobs, session.device)
    if reuse == p.REFILL:
        _refill(session.inputs, values)
    else:
        session.inputs = values


def _refill(target: dict, values: dict) -> None:
    for key, value in values.items():
        if isinstance(value, torch.Tensor):
            target[key].copy_(value)
        else:
            target[key] = value


def _received_inputs(header: dict, blobs, device: torch.device) -> dict:
    """The inputs of a request, on this executor's device; inputs that alias (views of one
    storage where the judge drew them) still alias here."""
    values = wire.decode_value(header["inputs"], blobs, views={})
    if not isinstance(values, dict):
        raise ValueError("the inputs are not a mapping")
    if device.type == "cpu":
        return values
    return copy_keeping_aliases(values, device)


def _with_outputs(session: Session, out, report: p.CallReport):
    blobs: list = []
    mutated = {k: session.inputs[k] for k in session.mutates if k in session.inputs}
    body = calls.encode_outputs(out, mutated, blobs) if report.raised is None else {}
    return {**body, "report": p.to_wire(report)}, blobs


class _Timer:
    """The timed buffers and function of the current shape (TIME_* requests).

    `inputs` are the first call's; a graph replay's other calls run on copies that `replay`
    owns for as long as the graph lives (runner/contract/graphplan.py says why that matters).
    Inputs the operator updates in place are restored from `pristine` before every repetition."""

    def __init__(self, session: Session):
        self.session = session
        self.flush = None
        self.reset()

    def reset(self) -> None:
        self.inputs: dict = {}
        self.outputs: list = [None]
        self.fn = None
        self.method = "cuda_events"
        self.calls = 1
        self.kept: list = []  # each repetition's output in the last batch
        self.groups: list = []  # storage groups of the timed inputs
        self.pristine: graphcopies.CallInputs | None = None  # in-place groups as drawn
        self.targets: list[graphcopies.CallInputs] = []  # restored before every repetition
        self.replay: _Replay | None = None
        # the inputs the operator does not update in place, as drawn, until the first recheck
        self.snapshot: dict | None = None

    def calling(self, inputs: dict, outputs: list):
        model = self.session.model

        def run():
            with torch.no_grad():
                outputs[0] = model(**inputs)
        return run

    def restore(self) -> None:
        for target in self.targets:
            graphcopies.restore(target, self.pristine)

    @property
    def before(self):
        return self.restore if self.pristine is not None else None


@dataclass
class _Replay:
    """What one replay runs, and everything its calls touch (kept alive with it)."""

    run: object
    method: str
    copies: list
    outputs: list
    targets: list  # the copies' in-place groups, restored before every repetition
    graph: object = None


def _time_prepare(session: Session, timer: _Timer, header: dict, blobs):
    timer.reset()
    timer.inputs = _received_inputs(header, blobs, session.device)
    timer.snapshot = _snapshot(timer.inputs, session.mutates)
    timer.groups = graphcopies.storage_groups(timer.inputs)
    in_place = _in_place_groups(timer.groups, session.mutates)
    if in_place:
        timer.pristine = graphcopies.copy_inputs(timer.inputs, timer.groups, in_place)
        timer.targets = [graphcopies.spans_of(timer.inputs, timer.groups, in_place)]
    timer.fn = timer.calling(timer.inputs, timer.outputs)
    if session.device.type != "cuda":
        timer.fn()
        return {"estimate_ms": None, "free_bytes": None}, []
    if timer.flush is None:
        timer.flush = timing.L2Flusher(session.device)
    # as many calls as a batch keeps outputs of: the allocator's pool has their blocks before
    # the first timed batch, so no repetition pays for a fresh device allocation
    held = []
    for _ in range(max(3, int(header.get("batch", 10)))):
        timer.restore()
        timer.fn()
        held.append(timer.outputs[0])
    torch.cuda.synchronize()
    del held
    free, _ = torch.cuda.mem_get_info(session.device)
    return {"estimate_ms": timing.quick_estimate_ms(timer.fn, timer.flush, before=timer.before),
            "free_bytes": free}, []


def _snapshot(inputs: dict, mutates: list[str]) -> dict | None:
    """Copies of the inputs the operator must leave as they are; None where they do not fit."""
    try:
        return {k: v.clone() for k, v in inputs.items()
                if isinstance(v, torch.Tensor) and k not in mutates}
    except torch.OutOfMemoryError:
        return None


def _changed_inputs(timer: _Timer) -> list[str] | None:
    """Inputs the operator does not update in place that the timed calls left changed, in the
    first call's buffers or a replay's copies; None when no snapshot was taken."""
    if timer.snapshot is None:
        return None
    held = [timer.inputs] + ([c.values for c in timer.replay.copies] if timer.replay else [])
    return sorted({k for values in held for k, drawn in timer.snapshot.items()
                   if not calls.same_bytes(drawn, values[k])})


def _in_place_groups(groups: list, mutates: list[str]) -> set[int]:
    return {i for i, group in enumerate(groups) if set(group.names) & set(mutates)}


def _time_graph(session: Session, timer: _Timer, header: dict, blobs):
    """Up to `calls` calls in one replay within `budget_bytes` of copies (graphplan.plan_graph);
    fewer when a capture runs out of memory; single calls with event timing when the calls
    cannot be captured at all (the reason goes back with the answer). On a CPU machine the
    same copies run as a plain sequence, so the layout is exercised where no graph exists."""
    specs = graphcopies.tensor_specs(timer.inputs, timer.groups, session.mutates)
    plan = graphplan.plan_graph(specs, graphcopies.output_bytes(timer.outputs[0]),
                                int(header.get("budget_bytes", 0)), int(header["calls"]),
                                shared=_shared(session.model))
    notes: list[str] = []
    for count in graphplan.fallback_calls(plan.calls):
        try:
            replay = _build_replay(session, timer, count)
        except timing.CaptureFailed as failure:
            notes.append(f"{count} calls per replay: {failure}")
            if failure.out_of_memory:
                continue
            break
        timer.replay, timer.fn = replay, replay.run
        timer.method, timer.calls = replay.method, count
        timer.targets = timer.targets[:1] + replay.targets
        break
    return {"method": timer.method, "calls": timer.calls, "plan": plan.describe(),
            "notes": notes}, []


def _build_replay(session: Session, timer: _Timer, count: int) -> _Replay:
    timer.restore()  # the copies start from the state the judge drew
    in_place = _in_place_groups(timer.groups, session.mutates)
    try:
        copies = [graphcopies.copy_inputs(timer.inputs, timer.groups) for _ in range(count - 1)]
    except torch.OutOfMemoryError as exc:
        raise timing.CaptureFailed(f"out of memory for the input copies: {exc}", True) from None
    outputs = [[None] for _ in copies]  # every call writes buffers of its own
    first = timer.calling(timer.inputs, timer.outputs)
    sequence = [first] + [timer.calling(c.values, o) for c, o in zip(copies, outputs,
                                                                       strict=True)]
    targets = [graphcopies.CallInputs(c.values, {i: c.spans[i] for i in in_place})
               for c in copies] if in_place else []
    if session.device.type != "cuda":
        def run():
            for fn in sequence:
                fn()
        return _Replay(run, "cpu_sequence", copies, outputs, targets)
    graph = timing.capture(sequence)
    return _Replay(graph.replay, "cuda_graph", copies, outputs, targets, graph)


def _shared(model) -> tuple[str, ...]:
    """What every call of a replay shares: the model's own parameters and buffers."""
    if not isinstance(model, torch.nn.Module):
        return ()
    nbytes = sum(t.numel() * t.element_size() for t in list(model.parameters())
                 + list(model.buffers()))
    return (f"model parameters and buffers ({nbytes} bytes)",) if nbytes else ()


def _time_batch(session: Session, timer: _Timer, header: dict, blobs):
    reps = int(header["reps"])
    timer.kept = []

    def launches() -> int:
        return session.tracker.launch_count

    def keep() -> None:
        timer.kept.append(timer.outputs[0])

    if session.device.type == "cuda":
        batch = timing.gpu_batch(timer.fn, timer.flush, reps, launches, keep, timer.before,
                                 hold_cycles=_hold(header))
    else:
        batch = timing.cpu_batch(timer.fn, reps, launches, keep, timer.before)
    return {"batch": p.to_wire(batch)}, []


def _hold(header: dict) -> int:
    hold = int(header.get("hold_cycles") or p.HOLD_CYCLES)
    if hold not in p.HOLD_LADDER:
        raise ValueError(f"hold_cycles {hold} is not one of {p.HOLD_LADDER}")
    return hold


def _time_output(session: Session, timer: _Timer, header: dict, blobs):
    """One repetition's output of the last batch, of the replay's first call or (`call` >= 1)
    of a later one, which runs on input copies holding the same values; the judge picks which
    after the batch ran. A graph replays into the same buffers, so there every repetition's
    output is the last one. Inputs updated in place come back as the last repetition left
    them (each started from the restored state, so that is any repetition's result)."""
    index, call = int(header["rep"]), int(header.get("call", 0))
    if call == 0:
        kept = timer.kept[index] if 0 <= index < len(timer.kept) else None
        inputs = timer.inputs
    elif timer.replay is not None and call <= len(timer.replay.copies):
        kept = timer.replay.outputs[call - 1][0]
        inputs = timer.replay.copies[call - 1].values
    else:
        raise ValueError(f"call {call} is not one of the {timer.calls} calls of a replay")
    out_blobs: list = []
    mutated = {k: inputs[k] for k in session.mutates if k in inputs}
    return calls.encode_outputs(kept, mutated, out_blobs), out_blobs


def _recheck(session: Session, timer: _Timer, header: dict, blobs):
    """New values in the timed buffers, one more call timed as a repetition is (a whole
    replay: the first call runs on these buffers), the first call's outputs and its in-place
    inputs back with that time, and which inputs the timed calls changed that they must not
    have (checked at the first recheck, before new values go in). In-place inputs are restored
    first (the later calls' copies start where every repetition did), then the new values go
    in, and the call runs on exactly them."""
    changed = _changed_inputs(timer)
    timer.snapshot = None  # the new values replace what it held
    timer.restore()
    _refill(timer.inputs, _received_inputs(header, blobs, session.device))
    if session.device.type == "cuda":
        batch = timing.gpu_batch(timer.fn, timer.flush, 1, lambda: 0, hold_cycles=_hold(header))
    else:
        batch = timing.cpu_batch(timer.fn, 1, lambda: 0)
    out_blobs: list = []
    mutated = {k: timer.inputs[k] for k in session.mutates if k in timer.inputs}
    reply = calls.encode_outputs(timer.outputs[0], mutated, out_blobs)
    return {**reply, "batch": p.to_wire(batch), "inputs_changed": changed}, out_blobs


def _settle(session: Session, timer: _Timer, header: dict, blobs):
    return {}, []


_HANDLERS = {p.SETTLE: _settle, p.BUILD: _build, p.CALL: _call, p.PROFILE: _profile,
             p.TIME_PREPARE: _time_prepare, p.TIME_GRAPH: _time_graph,
             p.TIME_BATCH: _time_batch, p.TIME_OUTPUT: _time_output, p.RECHECK: _recheck}
