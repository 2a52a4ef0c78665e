"""What the judge asks an executor to do, and the typed records an executor answers with.

Every request carries a sequence number that the answer must echo; the judge reads nothing it did
not ask for. An answer is data (outputs, launch records, host times, raw timings, what the
executor's guards saw), never a verdict: the judge decides every status. `from_wire` rebuilds a
record from untrusted JSON, checking every field's type, so a malformed answer is a
`ProtocolError`, not a crash of the judge.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field

from .wire import ProtocolError

# --- commands ------------------------------------------------------------------------------------
LOAD = "load"  # import the candidate module (the first request of every executor)
BUILD = "build"  # construct Model(**init_kwargs) for a shape, loading the reference's state
CALL = "call"  # one forward; every judged call goes this one way
PROFILE = "profile"  # one forward under the device profiler (GPU)
TIME_PREPARE = "time_prepare"  # buffers for timing, warm-up, a quick estimate
TIME_GRAPH = "time_graph"  # capture N calls on input copies in one CUDA graph (plan: graphplan)
TIME_BATCH = "time_batch"  # n timed repetitions
TIME_OUTPUT = "time_output"  # the output of one repetition of the last batch (chosen afterwards)
RECHECK = "recheck"  # new values in the timed buffers, one more timed call, its outputs back
# nothing to do: sent after a stage's last request, so an answer nobody asked for that trails
# that request's answer is found (on the send) before the stage's verdict stands
SETTLE = "settle"
EXIT = "exit"

# How a call's inputs are given: new tensors; new values copied into the previous call's tensors;
# or the previous call's tensors again, unchanged.
FRESH, REFILL, REPEAT = "fresh", "refill", "repeat"
# Replays: own kernels as no-ops (ghost); inputs replaced while own kernels run (taint); inputs
# replaced except while own kernels run (mirror).
NORMAL, GHOST, TAINT, MIRROR = "normal", "ghost", "taint", "mirror"

# Structure of one timed repetition, shared so the judge can reason about wall-clock bounds:
# a read of a buffer larger than L2, then a busy-wait of a hold's GPU cycles so the host's
# launch latency is hidden, then the timed work between two CUDA events, then a synchronize.
FLUSH_MIN_BYTES = 256 << 20
HOLD_CYCLES = 400_000
# The holds the judge may ask for, shortest first. A call whose host work between its launches
# outlasts the hold leaves the device idle inside the timed region, and host time is counted as
# device time; the executor says when the device reached the timed region before the host had
# enqueued all of it, and the judge then asks for the next hold (runner/judge/timing.py).
# At ~1.9 GHz: 0.2 ms, 1.7 ms, 13 ms.
HOLD_LADDER = (HOLD_CYCLES, 8 * HOLD_CYCLES, 64 * HOLD_CYCLES)


# --- records -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Raised:
    """An exception that left the candidate's code."""

    type: str
    message: str
    file: str | None = None  # relative to the candidate's directory, where a frame was there
    line: int | None = None
    compile: bool = False  # raised while importing or compiling
    cuda_broken: bool = False  # a CUDA error: this process's context is unusable
    out_of_memory: bool = False


@dataclass(frozen=True)
class LaunchRecord:
    name: str
    file: str
    own: bool  # defined in the candidate's repository
    storages: list[int] = field(default_factory=list)  # base pointers of its tensor arguments
    nbytes: int = 0  # bytes of those storages, once each
    # launched with programmatic dependent launch while its compiled code never waits for the
    # kernel before it (no griddepcontrol.wait); False where unknown (the interpreter)
    unsynced_pdl: bool = False


@dataclass(frozen=True)
class ComputeRecord:
    """An aten compute op run outside own kernels, with the work it represents."""

    name: str
    flops: float
    bytes: float
    peak: str


@dataclass(frozen=True)
class HostTime:
    """Host CPU time during one forward, all threads of the executor and its waited children."""

    total_ms: float = 0.0
    own_ms: float = 0.0  # while an own kernel ran (its compile and autotuning included)
    children_ms: float = 0.0  # child processes outside own launches
    read_bytes: int = 0  # floating tensor data read to the host outside own launches


@dataclass(frozen=True)
class GuardFlag:
    """Something an executor-side guard saw (a patched function, a live thread, ...)."""

    kind: str
    message: str


@dataclass(frozen=True)
class CallReport:
    raised: Raised | None = None
    launches: list[LaunchRecord] = field(default_factory=list)
    compute: list[ComputeRecord] = field(default_factory=list)
    host: HostTime = field(default_factory=HostTime)
    flags: list[GuardFlag] = field(default_factory=list)
    touched_inputs: list[str] = field(default_factory=list)  # inputs whose bytes changed
    output_storages: dict[str, int] = field(default_factory=dict)  # flat output -> storage ptr
    input_storages: dict[str, int] = field(default_factory=dict)
    previous_storages: list[int] = field(default_factory=list)  # the last call's, still alive
    own_written: list[str] = field(default_factory=list)  # outputs derived from own launches
    inputs_read: list[str] = field(default_factory=list)  # inputs that reached an own launch
    # the model's own account of what it ran (`atrex_implementation`, e.g. which cuBLAS path a
    # library peer took): shown for baselines, never trusted as evidence for a candidate
    implementation: str | None = None


@dataclass(frozen=True)
class KernelTime:
    name: str
    ms: float
    own: bool
    region: str  # "compute" / "glue": under an aten op of that kind; "wrapper"; "none"
    late: bool = False  # still running after forward returned


@dataclass(frozen=True)
class DeviceProfile:
    kernels: list[KernelTime] = field(default_factory=list)
    own_launches: int = 0  # own launches the tracker recorded during the profiled call
    complete: bool = True  # both markers seen: the profile covers the whole call


@dataclass(frozen=True)
class TimingBatch:
    times_ms: list[float] = field(default_factory=list)  # per repetition (per sample)
    own_launches: list[int] = field(default_factory=list)  # own launches per repetition (eager)
    # host time outside the timed regions spent restoring inputs updated in place (all
    # repetitions together): the judge's wall-clock bound leaves it out
    untimed_ms: float = 0.0
    # per repetition: the device had reached the timed region (its start event) before the host
    # finished enqueueing it, so host time may be inside the measured time
    device_waited: list[bool] = field(default_factory=list)
    # per repetition: host milliseconds from the start event's record to the end event's
    enqueue_ms: list[float] = field(default_factory=list)


# --- parsing untrusted JSON into records --------------------------------------------------------

def from_wire(cls, data):
    """`cls` rebuilt from JSON data, every field's type checked (ProtocolError otherwise)."""
    return _convert(cls, data, cls.__name__)


def to_wire(record) -> dict:
    return dataclasses.asdict(record)


def _convert(hint, value, where: str):
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        inner = [o for o in options if o is not type(None)]
        return _convert(inner[0], value, where)
    if dataclasses.is_dataclass(hint):
        return _record(hint, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list")
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{where}[]") for v in value]
    if origin is dict:
        if not isinstance(value, dict):
            raise ProtocolError(f"{where}: expected an object")
        _, item = typing.get_args(hint)
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    return _scalar(hint, value, where)


def _scalar(hint, value, where: str):
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    else:
        raise ProtocolError(f"{where}: unsupported field type {hint!r}")
    if not ok:
        raise ProtocolError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
    return value


def _record(cls, value, where: str):
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected an object")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(value) - names
    if unknown:
        raise ProtocolError(f"{where}: unknown fields {sorted(unknown)[:5]}")
    kwargs = {name: _convert(hints[name], value[name], f"{where}.{name}")
              for name in names if name in value}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ProtocolError(f"{where}: {exc}") from None
