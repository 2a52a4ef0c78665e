"""Verifying and timing candidates through the runner, summarized per candidate.

Every candidate of one round is judged by ONE runner judge with the incumbent, so the runner
judges each fully (correctness, fallback layers, anti-cheat) and times the passing ones interleaved
A B A B on the same GPU. On a CPU the runner measures no time; for tests only, an injected
:data:`Timer` may supply deterministic times there (never where the runner did time).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from atrex.runner.evaluate import EvalOptions, ProgressFn, evaluate
from atrex.runner.model import OpResult, Report, ShapeResult, Status
from atrex.runner.repo import OpSpec, RepoSpec
from atrex.runner.sandbox import CandidateRef

# Test seam: (candidate source, shape) -> time in ms. Used only where the runner measured nothing.
Timer = Callable[[str, ShapeResult], float]
INJECTED_RSE = 0.002
INJECTED_REPS = 100


def source_sha(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class CandidateFile:
    """A kernel module on disk that the runner can load (root decides which kernels are own)."""

    source: str
    kernel: Path
    root: Path

    @property
    def sha(self) -> str:
        return source_sha(self.source)


@dataclass
class ShapeNumbers:
    id: str
    status: str
    weight: float
    time_ms: float | None
    sol_ms: float | None
    timing_rse: float | None
    timing_reps: int | None
    roofline_fraction: float | None
    own_kernel_share: float | None
    bound: str | None
    timing_method: str | None
    message: str | None
    hard_floor_ms: float | None = None  # the part of sol_ms no kernel can go below


@dataclass
class Measurement:
    """One candidate in one evaluation: status, own-kernel share and, where timed, its speed."""

    status: str
    own_kernel_share: float | None
    shapes: list[ShapeNumbers]
    message: str | None = None
    findings: list[str] = field(default_factory=list)
    timing_source: str | None = None  # "runner", "injected" (tests) or None (not timed)

    @property
    def passed(self) -> bool:
        return self.status == Status.PASS.value

    @property
    def timed(self) -> bool:
        return self.passed and bool(self.shapes) and all(
            s.time_ms is not None for s in self.shapes)

    @property
    def weighted_time_ms(self) -> float | None:
        """Trace-weighted time of the shape mix, sum_s w_s T_s."""
        if not self.timed:
            return None
        return sum(s.weight * s.time_ms for s in self.shapes)

    @property
    def weighted_rse(self) -> float | None:
        """Relative standard error of the weighted time (shape errors independent)."""
        total = self.weighted_time_ms
        if not total:
            return None
        var = sum((s.weight * s.time_ms * (s.timing_rse or 0.0)) ** 2 for s in self.shapes)
        return math.sqrt(var) / total

    @property
    def roofline_fraction(self) -> float | None:
        """GPU-hour efficiency E_op = sum w T_SOL / sum w T: the roofline fraction of the mix."""
        total = self.weighted_time_ms
        if not total or any(s.sol_ms is None for s in self.shapes):
            return None
        return sum(s.weight * s.sol_ms for s in self.shapes) / total

    @property
    def max_shape_fraction(self) -> float | None:
        values = [s.roofline_fraction for s in self.shapes if s.roofline_fraction is not None]
        return max(values) if values else None

    def to_dict(self) -> dict:
        data = asdict(self)
        data.update(roofline_fraction=self.roofline_fraction,
                    weighted_time_ms=self.weighted_time_ms, weighted_rse=self.weighted_rse)
        return data


def measurement_from(op_result: OpResult, source: str | None, timer: Timer | None) -> Measurement:
    # a skipped shape (over the CPU memory budget) was not run: it has no time to weigh
    evaluated = [s for s in op_result.shapes if s.status is not Status.SKIPPED]
    shapes = [_shape_numbers(s) for s in evaluated]
    timing_source = "runner" if shapes and all(s.time_ms is not None for s in shapes) else None
    status = op_result.status.value
    if timer is not None and source is not None and status == Status.PASS.value \
            and all(s.time_ms is None for s in shapes):
        for numbers, shape in zip(shapes, evaluated, strict=True):
            _inject(numbers, timer(source, shape))
        timing_source = "injected"
    return Measurement(status=status, own_kernel_share=op_result.own_kernel_share, shapes=shapes,
                       message=_first_message(op_result), timing_source=timing_source,
                       findings=[f"{f.kind.value}: {f.message}" for f in op_result.findings][:6])


def _shape_numbers(shape: ShapeResult) -> ShapeNumbers:
    return ShapeNumbers(
        id=shape.id, status=shape.status.value, weight=shape.weight, time_ms=shape.time_ms,
        sol_ms=shape.sol_ms, timing_rse=shape.timing_rse, timing_reps=shape.timing_reps,
        roofline_fraction=shape.roofline_fraction, own_kernel_share=shape.own_kernel_share,
        bound=shape.bound, timing_method=shape.timing_method, message=shape.message,
        hard_floor_ms=shape.hard_floor_ms)


def _inject(numbers: ShapeNumbers, time_ms: float) -> None:
    numbers.time_ms = float(time_ms)
    numbers.timing_rse = INJECTED_RSE
    numbers.timing_reps = INJECTED_REPS
    numbers.timing_method = "injected"
    if numbers.sol_ms is not None and time_ms > 0:
        numbers.roofline_fraction = numbers.sol_ms / time_ms


def _first_message(op_result: OpResult) -> str | None:
    for shape in op_result.shapes:
        if shape.status is not Status.PASS and shape.message:
            return f"{shape.id}: {shape.message}"
    for finding in op_result.findings:
        return finding.message
    return None


@dataclass
class GpuClock:
    """Seconds the agent held the device (evaluations and profiling), against the budget."""

    limit_s: float
    spent_s: float = 0.0
    evaluation_costs_s: list[float] = field(default_factory=list)

    def charge(self, seconds: float, evaluation: bool = False) -> None:
        self.spent_s += seconds
        if evaluation:
            self.evaluation_costs_s.append(seconds)

    @property
    def left_s(self) -> float:
        return self.limit_s - self.spent_s

    def typical_evaluation_s(self) -> float:
        costs = self.evaluation_costs_s
        return max(costs[-3:]) if costs else 0.0


class Evaluator:
    """Runs labelled candidates of one op through the runner and charges the GPU clock."""

    def __init__(self, repo: RepoSpec, op: OpSpec, options: EvalOptions, clock: GpuClock,
                 timer: Timer | None = None, progress: ProgressFn | None = None):
        self.repo, self.op, self.options = repo, op, options
        self.clock, self.timer, self.progress = clock, timer, progress

    def measure(self, candidates: dict[str, CandidateFile]) -> tuple[dict[str, Measurement],
                                                                     dict[str, Report]]:
        plan = {self.op.name: [CandidateRef(label, c.kernel, c.root)
                               for label, c in candidates.items()]}
        started = time.monotonic()
        try:
            reports = evaluate(self.repo, plan, self.options, self.progress)
        finally:
            self.clock.charge(time.monotonic() - started, evaluation=True)
        measurements = {
            label: measurement_from(reports[label].op(self.op.name), cand.source, self.timer)
            for label, cand in candidates.items()}
        return measurements, reports
