"""The result contract shared by the runner, the agent and the bot.

Everything atrex measures ends up in a :class:`Report`. Units are in the field names (``time_ms``,
``sol_ms``, ``flops``, ``bytes``); statuses and finding kinds are closed enums; a value that was not
measured is ``None``, never a sentinel. ``Report.to_json`` / ``Report.from_json`` are the only way
the document crosses a process boundary, so the JSON schema version lives here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

SCHEMA_VERSION = "1.15"  # 1.1: ShapeResult.timing_calls_per_sample; 1.2: finding kinds of the
# judge/executor split (taint_replay, output_not_own, input_not_read, host_compute, ...);
# 1.3: statuses `skipped` (shape) and `format_error` (operator, with OpResult.format_error);
# 1.4: the native reference's own error, timing spread and note, the launch floor, finding
# `unavailable`; 1.5: ShapeResult.flops_by_class, bytes_read, bytes_written, flops_source,
# bytes_source, hard_floor_ms; 1.6: ShapeResult.implementation; 1.7: wall seconds the judge
# spent (ShapeResult.check_wall_s, shape_wall_s; OpResult.load_wall_s); 1.8: finding
# `unsynced_pdl`; 1.9: ShapeResult.timing_hold_cycles, timing_enqueue_ms; 1.10:
# ShapeResult.timing_new_values_ms, finding `mirror_replay`; 1.11: DeviceInfo.uuid; 1.12: the
# card's clocks while the shape was timed (ShapeResult.timing_sm_clock_mhz, ...); 1.13: the
# calibrated read floors (DeviceInfo.cold_read_floor_ms, dependent_read_floor_ms); 1.14:
# DeviceInfo.executor_writes_confined, executor_landlock_abi; 1.15: DeviceInfo.executor_hidden_paths


class Status(StrEnum):
    PASS = "pass"
    INCORRECT = "incorrect"
    FALLBACK = "fallback"
    SUSPICIOUS = "suspicious"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    # the operator's files are malformed: OpResult.format_error says where; nothing ran
    FORMAT_ERROR = "format_error"
    # not evaluated on purpose (over the CPU memory budget, ...): ShapeResult.message says why
    SKIPPED = "skipped"

    @property
    def failed_check(self) -> bool:
        """True for statuses that mean the kernel is wrong or not its own (not merely broken)."""
        return self in (Status.INCORRECT, Status.FALLBACK, Status.SUSPICIOUS)


# An op takes the most severe status among its shapes: a cheat outranks a wrong answer, which
# outranks a crash, so a reader sees the most important problem first.
# A skipped shape is no verdict: it counts only when nothing else was evaluated.
STATUS_SEVERITY = (
    Status.SUSPICIOUS,
    Status.FALLBACK,
    Status.INCORRECT,
    Status.FORMAT_ERROR,
    Status.COMPILE_ERROR,
    Status.RUNTIME_ERROR,
    Status.TIMEOUT,
    Status.PASS,
)


def worst_status(statuses) -> Status:
    present = set(statuses)
    if present == {Status.SKIPPED}:
        return Status.SKIPPED
    for status in STATUS_SEVERITY:
        if status in present:
            return status
    return Status.PASS


class WorkSource(StrEnum):
    """Where a shape's FLOPs or bytes came from (docs/roofline.md)."""

    COUNTED = "counted"  # on the reference, every tensor whole
    TOUCHED = "touched"  # bytes: some tensors count only the rows the reference touched
    DECLARED = "declared"  # metadata.json's `flops` / `bytes`
    # the counter failed on this reference: no FLOPs, every input read and every output written
    # once (a floor that may be too high or too low; declare the shape's work to replace it)
    UNCOUNTED = "uncounted"


class FindingKind(StrEnum):
    # static hints (AST scan); never decide a status alone
    TORCH_COMPUTE_CALL = "torch_compute_call"
    TORCH_COMPILE = "torch_compile"
    REFERENCE_IMPORT = "reference_import"
    LIBRARY_IMPORT = "library_import"
    # fallback layers
    DISPATCH_FALLBACK = "dispatch_fallback"
    LIBRARY_KERNEL_TIME = "library_kernel_time"
    GHOST_REPLAY = "ghost_replay"
    NO_OWN_KERNEL = "no_own_kernel"
    TAINT_REPLAY = "taint_replay"  # right output while own kernels read other values
    MIRROR_REPLAY = "mirror_replay"  # wrong output while only own kernels read the real values
    OUTPUT_NOT_OWN = "output_not_own"  # an output no own kernel wrote
    INPUT_NOT_READ = "input_not_read"  # a floating input no own kernel read
    HOST_COMPUTE = "host_compute"  # host CPU time outside own kernels beyond glue
    # correctness
    MISMATCH = "mismatch"
    NON_FINITE = "non_finite"
    STRUCTURE = "structure"
    INPUT_MUTATION = "input_mutation"
    # anti-cheat
    OUTPUT_CACHE = "output_cache"
    STALE_OUTPUT = "stale_output"
    SIDE_THREAD = "side_thread"
    SIDE_STREAM = "side_stream"
    PATCHED_FUNCTION = "patched_function"
    EVALUATOR_TAMPERED = "evaluator_tampered"  # a recorder removed, a mode left active
    CHILD_PROCESS = "child_process"  # the candidate started processes
    PROTOCOL = "protocol"  # the executor broke the message contract
    TIMING_MISMATCH = "timing_mismatch"  # reported times disagree with the judge's wall clock
    TENSOR_SUBCLASS = "tensor_subclass"
    UNSYNCED_PDL = "unsynced_pdl"  # a PDL launch that never waits for the kernel before it
    LAZY_OUTPUT = "lazy_output"
    BEYOND_ROOFLINE = "beyond_roofline"
    RECHECK_FAILED = "recheck_failed"
    # failures
    COMPILE_ERROR = "compile_error"
    NOT_TRITON = "not_triton"  # a @triton.jit body that uses something Triton cannot lower
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"  # a library peer not importable or not supported on this machine


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    message: str
    file: str | None = None
    line: int | None = None
    shape_id: str | None = None


@dataclass
class ShapeResult:
    id: str
    status: Status
    weight: float = 1.0
    time_ms: float | None = None
    sol_ms: float | None = None  # roofline floor against the datasheet peaks
    sol_measured_ms: float | None = None  # roofline floor against measured (calibrated) ceilings
    roofline_fraction: float | None = None  # sol_ms / time_ms
    roofline_fraction_measured: float | None = None
    own_kernel_share: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    flops: float | None = None
    bytes: float | None = None
    bound: str | None = None  # "memory" or "compute": which roofline term is the floor
    # FLOPs by class (runner/work/classes.py: "bf16", "fp8", ... on tensor cores; "fp32",
    # "<dtype>_vector" on CUDA cores) and the bytes split into read and written
    flops_by_class: dict[str, float] | None = None
    bytes_read: float | None = None
    bytes_written: float | None = None
    flops_source: WorkSource | None = None
    bytes_source: WorkSource | None = None
    # the part of sol_ms no kernel can go below (bytes, tensor-core FLOPs): a time under it is
    # `suspicious`; a time under sol_ms but not under this is reported, not judged
    hard_floor_ms: float | None = None
    timing_method: str | None = None  # "cuda_events" or "cuda_graph"
    launch_bound: bool | None = None  # timed as a CUDA-graph replay because launches dominate
    timing_calls_per_sample: int | None = None  # calls per timed sample (a graph holds several)
    timing_mean_ms: float | None = None
    timing_reps: int | None = None
    timing_rse: float | None = None  # relative standard error of the timed mean
    # the judge's own wall clock per call, less the fixed cost of a repetition: an independent
    # upper bound (it includes the executor's host overheads) that the reported time is checked
    # against
    timing_judge_ms: float | None = None
    # 1.9: the device hold (GPU cycles) the kept repetitions ran under: longer than the shortest
    # where the call's host work outlasted it (runner/contract/protocol.py HOLD_LADDER), and the
    # median host time to enqueue one timed repetition (the executor's clock, for diagnosis)
    timing_hold_cycles: int | None = None
    timing_enqueue_ms: float | None = None
    # 1.10: after timing, the median time per call of a few calls on new values in the timed
    # buffers (each checked); far above time_ms, the repetitions skipped work (`output_cache`)
    timing_new_values_ms: float | None = None
    message: str | None = None
    # 1.4: the tolerance grounded in the framework's own error (runner/judge/compare.py): the
    # candidate's relative L2 error, and the reference run at its native dtype against the oracle
    rel_l2_error: float | None = None
    reference_max_abs_error: float | None = None
    reference_rel_l2_error: float | None = None
    # 1.4: (max - min) / median of the medians of five blocks of samples, and why the repetitions
    # stopped (targets met, or which was missed and the limit that ended them) or graph notes
    timing_spread: float | None = None
    timing_note: str | None = None
    # 1.12: the card while the shape's repetitions ran (nvidia-smi beside them, every contestant
    # of the shape interleaved): the median SM clock and its range, the highest power draw and
    # temperature, and the reasons nvidia-smi gave for holding the clock down in any sample
    # (runner/judge/clocks.py); None where nothing was sampled
    timing_sm_clock_mhz: float | None = None
    timing_sm_clock_range_mhz: list[int] | None = None
    timing_power_max_w: float | None = None
    timing_temperature_max_c: int | None = None
    timing_slowdowns: list[str] | None = None
    # 1.4: launch-bound shapes: the device's measured launch floor (one empty kernel per call of a
    # replayed CUDA graph, `atrex calibrate`) and max(sol_ms, launch_floor_ms) / time_ms
    launch_floor_ms: float | None = None
    launch_floor_fraction: float | None = None
    # 1.6: a baseline's own account of what it ran (a library peer's `atrex_implementation`, such
    # as the cuBLAS path it took); a candidate's is not recorded (it would be its own claim)
    implementation: str | None = None
    # 1.7: wall seconds in the judge: this contestant's correctness stage on this shape (a
    # compiled baseline's compilation included), and the whole shape for every contestant (the
    # reference, every check, the interleaved timing): what a run costs, for planning one
    check_wall_s: float | None = None
    shape_wall_s: float | None = None


@dataclass(frozen=True)
class FormatIssue:
    """Where an operator's files are malformed: the file, the field in it, what is wrong."""

    file: str
    field: str | None
    message: str


@dataclass
class OpResult:
    name: str
    status: Status
    score: float | None = None  # GPU-hour efficiency E_op; None when nothing was timed
    score_measured: float | None = None  # the same against measured (calibrated) ceilings
    own_kernel_share: float | None = None  # the lowest share over the op's shapes
    importance: float | None = None  # normalized share of GPU time W_op
    gpu_hours_at_stake: float | None = None
    findings: list[Finding] = field(default_factory=list)
    shapes: list[ShapeResult] = field(default_factory=list)
    format_error: FormatIssue | None = None  # set with status format_error
    load_wall_s: float | None = None  # 1.7: starting this contestant's executor and its import


@dataclass
class Peaks:
    """Hardware ceilings: dense TFLOP/s per compute dtype and memory bandwidth in TB/s."""

    source: str  # "datasheet" or "measured"
    tflops: dict[str, float]
    bandwidth_tbps: float


@dataclass
class DeviceInfo:
    kind: str  # "cpu" or "cuda"
    name: str
    gpu_key: str | None = None  # key into the peak table, e.g. "h200_sxm"
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    peaks: Peaks | None = None
    peaks_measured: Peaks | None = None
    sandbox: str = "subprocess"
    launch_floor_ms: float | None = None  # 1.4: measured by `atrex calibrate`, per empty kernel
    # 1.13: `atrex calibrate`'s floors of a kernel reading one cold line, plain and after an
    # index read (what a launch-bound kernel that reads its input pays before its bytes)
    cold_read_floor_ms: float | None = None
    dependent_read_floor_ms: float | None = None
    # 1.11: the physical card (nvidia-smi's GPU UUID). Cards of one model differ: a bench of one
    # kernel took 382.3 us on one H100 and 395.7-398.9 on another (benchmarks/results/README.md)
    uuid: str | None = None
    # 1.14: whether every executor that loaded a candidate had its writes confined by Landlock
    # (runner/executor/confine.py; None: no executor loaded) and the lowest ABI that did it
    executor_writes_confined: bool | None = None
    executor_landlock_abi: int | None = None
    # 1.15: how many secret paths (the worker's key, settings, database, checkouts) Landlock hid
    # from every loaded executor's reads; 0: none named or none hidden; None: no executor loaded
    executor_hidden_paths: int | None = None


@dataclass
class Report:
    device: DeviceInfo
    ops: list[OpResult]
    timing_available: bool
    score: float | None = None  # importance-weighted repo score; None without timing
    score_measured: float | None = None
    gpu_hours_at_stake: float | None = None
    gpu_hours_unit: str = "per traced call mix"
    notes: list[str] = field(default_factory=list)
    repo: str | None = None
    schema_version: str = SCHEMA_VERSION
    created_at: str | None = None
    tool_version: str | None = None

    @property
    def status(self) -> Status:
        return worst_status(op.status for op in self.ops)

    def op(self, name: str) -> OpResult:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        version = str(data.get("schema_version", ""))
        if version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise ValueError(f"report schema_version {version!r} is not {SCHEMA_VERSION}.x")
        return _build(cls, data)

    @classmethod
    def from_json(cls, text: str) -> Report:
        return cls.from_dict(json.loads(text))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


_NESTED = {
    (Report, "device"): DeviceInfo,
    (Report, "ops"): OpResult,
    (OpResult, "findings"): Finding,
    (OpResult, "shapes"): ShapeResult,
    (OpResult, "format_error"): FormatIssue,
    (DeviceInfo, "peaks"): Peaks,
    (DeviceInfo, "peaks_measured"): Peaks,
}
_ENUMS = {(OpResult, "status"): Status, (ShapeResult, "status"): Status,
          (Finding, "kind"): FindingKind, (ShapeResult, "flops_source"): WorkSource,
          (ShapeResult, "bytes_source"): WorkSource}


def _build(cls: type, data: dict[str, Any]) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for name, value in data.items():
        if name not in known:
            continue  # newer minor versions may add fields; readers ignore what they don't know
        nested = _NESTED.get((cls, name))
        enum = _ENUMS.get((cls, name))
        if value is not None and nested is not None:
            value = [_build(nested, v) for v in value] if isinstance(value, list) else _build(
                nested, value)
        elif value is not None and enum is not None:
            value = enum(value)
        kwargs[name] = value
    return cls(**kwargs)
