"""What the figures show, as plain data: one row per operator and shape, one mark per contestant.

A pure stage between the reports and matplotlib (runner/plot.py), so what a chart contains can be
tested without drawing it. Rows are numbered in the order of the GPU-hours at stake of the primary
contestant (head for a PR, kb for `bench`); the roofline's numbered key and the bar chart share the
numbers. FLOPs and bytes are the ones the report carries (counted on the reference by the judge, or
declared); nothing is recounted here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import OpResult, Peaks, Report, ShapeResult, Status
from .scoring import MS_PER_HOUR

# The contestant whose numbers order the rows, by preference.
PRIMARY_LABELS = ("head", "kb")


@dataclass(frozen=True)
class Mark:
    """One contestant's result on one operator and shape."""

    series: str
    status: Status
    time_ms: float | None
    sol_ms: float | None
    fraction: float | None
    fraction_measured: float | None
    own_share: float | None
    max_rel_error: float | None
    max_abs_error: float | None

    @property
    def timed(self) -> bool:
        return self.status is Status.PASS and self.time_ms is not None and bool(self.time_ms)


@dataclass
class Row:
    number: int
    op: str
    shape: str
    flops: float | None
    bytes: float | None
    weight: float
    stake_hours: float | None  # the primary contestant's GPU-hours at stake on this shape
    marks: dict[str, Mark] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.op} / {self.shape}"

    @property
    def intensity(self) -> float | None:
        """FLOP per byte; None for pure data movement (no FLOPs counted) or unknown work."""
        if not self.flops or not self.bytes:
            return None
        return self.flops / self.bytes

    def attained_flops(self, mark: Mark) -> float | None:
        if not mark.timed or not self.flops:
            return None
        return self.flops / (mark.time_ms * 1e-3)

    def attained_tbps(self, mark: Mark) -> float | None:
        if not mark.timed or not self.bytes:
            return None
        return self.bytes / (mark.time_ms * 1e-3) / 1e12


@dataclass(frozen=True)
class Ceiling:
    """A roof: memory bandwidth and one compute rate, from the datasheet or measured."""

    source: str  # "datasheet" or "measured"
    dtype: str  # the compute class of the flat part, e.g. "bf16"
    tflops: float
    bandwidth_tbps: float

    @property
    def ridge(self) -> float:
        """FLOP/byte where the roof turns from memory- to compute-bound."""
        return self.tflops / self.bandwidth_tbps


def as_series(reports: Report | dict[str, Report]) -> dict[str, Report]:
    if isinstance(reports, Report):
        return {"": reports}
    if not reports:
        raise ValueError("no report to draw")
    return dict(reports)


def primary_label(series: dict[str, Report]) -> str:
    for label in PRIMARY_LABELS:
        if label in series:
            return label
    return list(series)[-1]


def lead_report(series: dict[str, Report]) -> Report:
    """The primary contestant's report, with measured ceilings from any contestant where it
    has none (the same GPU: base and head of a PR run interleaved on one device)."""
    import dataclasses

    lead = series[primary_label(series)]
    if lead.device.peaks_measured is None:
        measured = next((r.device.peaks_measured for r in series.values()
                         if r.device.peaks_measured and r.device.name == lead.device.name), None)
        if measured is not None:
            device = dataclasses.replace(lead.device, peaks_measured=measured)
            return dataclasses.replace(lead, device=device)
    return lead


def rows(series: dict[str, Report]) -> list[Row]:
    """Every operator and shape of any contestant, numbered by GPU-hours at stake (descending);
    shapes without a stake (not timed, not `pass`) follow, by the operator's weight."""
    primary = series[primary_label(series)]
    found: dict[tuple[str, str], Row] = {}
    importance: dict[str, float] = {}
    for label, report in series.items():
        for op in report.ops:
            importance.setdefault(op.name, op.importance or 0.0)
            stakes = shape_stakes(op) if report is primary else {}
            for shape in op.shapes:
                row = found.setdefault((op.name, shape.id), Row(
                    0, op.name, shape.id, shape.flops, shape.bytes, shape.weight, None))
                if report is primary:
                    row.stake_hours = stakes.get(shape.id)
                row.marks[label] = _mark(label, shape)
    ordered = sorted(found.values(), key=lambda r: (
        r.stake_hours is None, -(r.stake_hours or 0.0), -importance.get(r.op, 0.0), r.op,
        -r.weight))
    for number, row in enumerate(ordered, start=1):
        row.number = number
    return ordered


def _mark(label: str, shape: ShapeResult) -> Mark:
    return Mark(label, shape.status, shape.time_ms, shape.sol_ms, shape.roofline_fraction,
                shape.roofline_fraction_measured, shape.own_kernel_share, shape.max_rel_error,
                shape.max_abs_error)


def shape_stakes(op: OpResult) -> dict[str, float]:
    """GPU-hours at stake per timed shape, w_s (T_s - T_SOL,s), scaled as the op's total is."""
    raw = {s.id: s.weight * max(0.0, s.time_ms - s.sol_ms) for s in op.shapes
           if s.status is Status.PASS and s.time_ms is not None and s.sol_ms is not None}
    total = sum(raw.values())
    # the op's stake carries its trace scale; without one (a failing op) the scale is 1
    scale = (op.gpu_hours_at_stake * MS_PER_HOUR / total
             if op.gpu_hours_at_stake and total > 0 else 1.0)
    return {sid: ms * scale / MS_PER_HOUR for sid, ms in raw.items()}


def ceilings(report: Report, shape_rows: list[Row]) -> list[Ceiling]:
    """The bf16 roof from the datasheet and measured peaks, plus the roof of any other compute
    class a compute-bound shape's floor was rated at (e.g. fp8)."""
    datasheet = report.device.peaks
    classes = ["bf16", *_classes_used(datasheet, shape_rows)] if datasheet else ["bf16"]
    found = []
    for peaks in (datasheet, report.device.peaks_measured):
        if peaks is None:
            continue
        found += [Ceiling(peaks.source, dtype, peaks.tflops[dtype], peaks.bandwidth_tbps)
                  for dtype in dict.fromkeys(classes) if peaks.tflops.get(dtype)]
    return found


_CLASS_ORDER = ("bf16", "fp8", "fp32", "tf32", "int8", "fp64")


def _classes_used(peaks: Peaks, shape_rows: list[Row]) -> list[str]:
    """Compute classes whose datasheet rate reproduces a compute-bound shape's floor (within
    2%); one class per distinct rate (fp32 and fp64 share 66.9 TFLOP/s on an H200)."""
    used: list[str] = []
    for row in shape_rows:
        for mark in row.marks.values():
            if not row.flops or not mark.sol_ms or row.bytes is None:
                continue
            if mark.sol_ms <= row.bytes / (peaks.bandwidth_tbps * 1e9) * 1.0001:
                continue  # memory-bound: the floor says nothing about the compute class
            rate = row.flops / (mark.sol_ms * 1e9)  # TFLOP/s
            match = next((cls for cls in _CLASS_ORDER if peaks.tflops.get(cls)
                          and abs(peaks.tflops[cls] - rate) <= 0.02 * peaks.tflops[cls]), None)
            if match and match not in used:
                used.append(match)
    return used


def timing_available(series: dict[str, Report]) -> bool:
    return any(report.timing_available for report in series.values())
