"""Roofline floors and GPU-hour scores (DESIGN §3.5-3.6), as pure functions of measured numbers.

- shape:  T_SOL = max(max_unit sum_{d on unit} W_d / P_d, Q / B), the units being tensor cores
          and CUDA cores (runner.work.classes);  roofline fraction S = T_SOL / T
- op:     E_op = sum_s w_s T_SOL,s / sum_s w_s T_s  (0 when any shape is not `pass`; `skipped`
          shapes were not evaluated and are left out of the sums)
- repo:   sum_op W_op E_op, with W_op the op's normalized share of GPU time
- stake:  sum_s w_s (T_s - T_SOL,s), in GPU-hours over the traced calls
"""

from __future__ import annotations

from .model import OpResult, Peaks, ShapeResult, Status
from .work import classes

MS_PER_HOUR = 3.6e6

# Launch-bound shapes are timed as CUDA-graph replays, as serving engines run decode steps: a
# roofline floor under 5 us, or an eager measurement under 20 us.
LAUNCH_BOUND_SOL_MS = 0.005
LAUNCH_BOUND_EAGER_MS = 0.02


def sol_ms(flops: dict[str, float], nbytes: float, peaks: Peaks | None) -> float | None:
    """T_SOL: the slower of the compute units (tensor cores, CUDA cores; classes on one unit
    add up, see runner.work.classes) and the memory term."""
    if peaks is None:
        return None
    return classes.sol_ms(flops, nbytes, peaks.tflops, peaks.bandwidth_tbps)


def hard_floor_ms(flops: dict[str, float], nbytes: float, peaks: Peaks | None) -> float | None:
    if peaks is None:
        return None
    return classes.hard_floor_ms(flops, nbytes, peaks.tflops, peaks.bandwidth_tbps)


def beyond_hardware(shape: ShapeResult, margin: float) -> bool:
    """Faster than the hardware allows, by more than `margin`: against the hard floor (bytes and
    tensor-core work), or T_SOL for a report without one."""
    floor = shape.hard_floor_ms if shape.hard_floor_ms is not None else shape.sol_ms
    return bool(floor and shape.time_ms and floor / shape.time_ms > margin)


def bound(flops: dict[str, float], nbytes: float, peaks: Peaks | None) -> str | None:
    if peaks is None:
        return None
    return classes.bound(flops, nbytes, peaks.tflops, peaks.bandwidth_tbps)


# A call on new values this many times faster or slower than the timed ones (and by more than
# DRAW_FLOOR_MS) means the time holds for the timed draw only. The sampling kernel took 583.8 us
# on one secret draw and 58.1 on the same run's new values (results/h200-baac206). In every other
# row of the H100 and H200 benches of stop 32 the two agreed within 7%, but for the eager MoE
# references (their routing depends on the values): 15%.
DRAW_RATIO = 1.5
DRAW_FLOOR_MS = 0.005


def draw_dependent(timed_ms: float | None, new_values_ms: float | None) -> bool:
    """Whether a call's time depends on the input values (the timed draw against new ones)."""
    if not timed_ms or not new_values_ms or abs(timed_ms - new_values_ms) <= DRAW_FLOOR_MS:
        return False
    return max(timed_ms, new_values_ms) >= DRAW_RATIO * min(timed_ms, new_values_ms)


def fraction(sol: float | None, time_ms: float | None) -> float | None:
    if sol is None or not time_ms:
        return None
    return sol / time_ms


def evaluated(shapes: list[ShapeResult]) -> list[ShapeResult]:
    """The shapes that were run: a skipped shape has no verdict and no time."""
    return [s for s in shapes if s.status is not Status.SKIPPED]


def op_efficiency(shapes: list[ShapeResult]) -> float | None:
    """GPU-hour efficiency of the traced shape mix; None when it was not timed."""
    shapes = evaluated(shapes)
    if not shapes:
        return None
    if any(s.status is not Status.PASS for s in shapes):
        return 0.0
    if any(s.time_ms is None or s.sol_ms is None for s in shapes):
        return None
    actual = sum(s.weight * s.time_ms for s in shapes)
    ideal = sum(s.weight * s.sol_ms for s in shapes)
    return ideal / actual if actual > 0 else None


def measured_efficiency(shapes: list[ShapeResult]) -> float | None:
    shapes = evaluated(shapes)
    if not shapes or any(s.status is not Status.PASS for s in shapes):
        return 0.0 if shapes else None
    if any(s.time_ms is None or s.sol_measured_ms is None for s in shapes):
        return None
    actual = sum(s.weight * s.time_ms for s in shapes)
    return sum(s.weight * s.sol_measured_ms for s in shapes) / actual if actual > 0 else None


def gpu_hours_at_stake(shapes: list[ShapeResult], trace_scale: float = 1.0) -> float | None:
    shapes = evaluated(shapes)
    if not shapes or any(s.time_ms is None or s.sol_ms is None for s in shapes):
        return None
    stake_ms = sum(s.weight * max(0.0, s.time_ms - s.sol_ms) for s in shapes)
    return stake_ms * trace_scale / MS_PER_HOUR


def normalized_importance(raw: dict[str, float | None]) -> dict[str, float]:
    """Each op's share of GPU time; ops without a declared share get the mean of the others."""
    known = [v for v in raw.values() if v is not None]
    fill = sum(known) / len(known) if known else 1.0
    values = {name: (fill if v is None else v) for name, v in raw.items()}
    total = sum(values.values())
    if total <= 0:
        return {name: 1.0 / len(values) for name in values} if values else {}
    return {name: v / total for name, v in values.items()}


def repo_score(ops: list[OpResult], attr: str = "score") -> float | None:
    values = [(op.importance, getattr(op, attr)) for op in ops]
    if not values or any(score is None or weight is None for weight, score in values):
        return None
    return sum(weight * score for weight, score in values)
