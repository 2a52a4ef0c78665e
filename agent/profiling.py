"""Profiling the incumbent and naming its bottleneck: memory, compute, latency or occupancy.

With ``ncu`` on a GPU the class comes from hardware counters of the incumbent's longest own kernel
on its most expensive shape (DRAM and SM throughput, achieved occupancy, stall reasons). Without it
the class comes from the runner's numbers: the roofline bound, the roofline fraction and whether
the shape is launch-bound. The class drives what the knowledge base returns and what the prompt
asks for.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from atrex.runner.scoring import LAUNCH_BOUND_EAGER_MS, LAUNCH_BOUND_SOL_MS

from .measure import CandidateFile, GpuClock, Measurement, ShapeNumbers

# A memory-bound kernel under this fraction of roofline is not limited by bandwidth but by too few
# bytes in flight (latency); above it, the remaining gains come from moving fewer bytes.
SATURATED_FRACTION = 0.5
# ncu thresholds (percent of peak)
BUSY_PCT = 60.0
LOW_OCCUPANCY_PCT = 30.0
LAUNCH_BOUND_US = 10.0
# ncu runs only while the budget still holds this many evaluation rounds (it costs about one).
NCU_BUDGET_ROUNDS = 4


@dataclass
class Profile:
    bottleneck: str  # memory | compute | latency | occupancy
    source: str  # "ncu" or "runner"
    shape_id: str | None
    evidence: str
    metrics: dict[str, float] = field(default_factory=dict)
    stalls: list[tuple[str, float]] = field(default_factory=list)
    note: str | None = None  # why ncu was not used, when it was wanted

    def to_dict(self) -> dict:
        return asdict(self)


def dominant_shape(measurement: Measurement) -> ShapeNumbers | None:
    """The shape that burns the most GPU time (weight x time), else the most work (weight x SOL)."""
    shapes = measurement.shapes
    if not shapes:
        return None
    if all(s.time_ms is not None for s in shapes):
        return max(shapes, key=lambda s: s.weight * s.time_ms)
    if all(s.sol_ms is not None for s in shapes):
        return max(shapes, key=lambda s: s.weight * s.sol_ms)
    return shapes[0]


def classify_from_runner(measurement: Measurement) -> Profile:
    shape = dominant_shape(measurement)
    if shape is None:
        return Profile("latency", "runner", None, "no shape results; assuming latency")
    bound = shape.bound or "memory"
    launch_bound = (shape.sol_ms is not None and shape.sol_ms < LAUNCH_BOUND_SOL_MS) or (
        shape.time_ms is not None and shape.time_ms < LAUNCH_BOUND_EAGER_MS)
    fraction = shape.roofline_fraction
    where = f"shape {shape.id} ({bound}-bound"
    if launch_bound:
        return Profile("latency", "runner", shape.id, f"{where}, launch-bound: SOL "
                       f"{_ms(shape.sol_ms)}, time {_ms(shape.time_ms)})")
    if fraction is None:
        return Profile(bound, "runner", shape.id, f"{where}; not timed, class from the roofline "
                       "bound only)")
    if bound == "compute":
        return Profile("compute", "runner", shape.id, f"{where}, {fraction:.2f} of roofline)")
    if fraction >= SATURATED_FRACTION:
        return Profile("memory", "runner", shape.id, f"{where}, {fraction:.2f} of roofline: "
                       "near bandwidth, fewer bytes is what is left)")
    return Profile("latency", "runner", shape.id, f"{where}, only {fraction:.2f} of roofline: "
                   "too few bytes in flight)")


def classify_from_ncu(metrics: dict[str, float], stalls: list[tuple[str, float]],
                      shape_id: str | None, kernel: str) -> Profile:
    dram = metrics.get("dram_pct", 0.0)
    sm = metrics.get("sm_pct", 0.0)
    occupancy = metrics.get("achieved_occupancy_pct")
    duration_us = metrics.get("duration_us")
    evidence = _ncu_evidence(kernel, metrics, stalls)
    if duration_us is not None and duration_us < LAUNCH_BOUND_US and max(dram, sm) < BUSY_PCT:
        cls = "latency"
    elif max(dram, sm) >= BUSY_PCT:
        cls = "memory" if dram >= sm else "compute"
    elif occupancy is not None and occupancy < LOW_OCCUPANCY_PCT:
        cls = "occupancy"
    else:
        cls = "latency"
    return Profile(cls, "ncu", shape_id, evidence, metrics=metrics, stalls=stalls[:3])


def _ncu_evidence(kernel: str, metrics: dict[str, float], stalls) -> str:
    parts = [f"kernel {kernel}"]
    labels = (("duration_us", "duration {:.1f} us"), ("dram_pct", "DRAM {:.0f}% of peak"),
              ("sm_pct", "SM {:.0f}% of peak"),
              ("achieved_occupancy_pct", "achieved occupancy {:.0f}%"),
              ("theoretical_occupancy_pct", "theoretical {:.0f}%"), ("grid_size", "grid {:.0f}"),
              ("block_size", "block {:.0f} threads"), ("registers", "{:.0f} registers/thread"))
    for key, fmt in labels:
        if key in metrics:
            parts.append(fmt.format(metrics[key]))
    if stalls:
        parts.append("top stalls " + ", ".join(f"{name} {value:.2f}" for name, value in stalls[:3]))
    return "; ".join(parts)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.2f} us"


class Profiler:
    """Profiles an incumbent: ncu when asked for and working on a GPU, else the runner's numbers."""

    def __init__(self, op, device: str, use_ncu: str, clock: GpuClock, device_index: int = 0,
                 timeout_s: float = 180.0):
        self.op, self.device, self.use_ncu = op, device, use_ncu
        self.clock, self.device_index, self.timeout_s = clock, device_index, timeout_s
        self.ncu_broken: str | None = None

    def profile(self, candidate: CandidateFile, measurement: Measurement) -> Profile:
        fallback = classify_from_runner(measurement)
        if self.device != "cuda" or self.use_ncu == "off" or not measurement.passed:
            return fallback
        if self.ncu_broken:
            fallback.note = f"ncu not used: {self.ncu_broken}"
            return fallback
        if self.clock.left_s < NCU_BUDGET_ROUNDS * self.clock.typical_evaluation_s():
            fallback.note = "ncu skipped: the GPU budget is kept for measuring candidates"
            return fallback
        shape = dominant_shape(measurement)
        from . import ncu

        started = time.monotonic()
        try:
            result = ncu.profile_kernel(candidate, self.op, shape.id, self.device_index,
                                        self.timeout_s)
        except ncu.NcuError as exc:
            self.ncu_broken = str(exc)
            fallback.note = f"ncu not used: {exc}"
            return fallback
        finally:
            self.clock.charge(time.monotonic() - started)
        return classify_from_ncu(result.metrics, result.stalls, shape.id, result.kernel)
