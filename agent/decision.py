"""The acceptance rule: only a verified candidate with a significant gain replaces the incumbent.

A candidate is rejected, whatever its speed, when any shape is not ``pass`` (incorrect, fallback,
suspicious, compile/runtime error, timeout) or any shape reads above the roofline (faster than the
hardware floor: something skipped work). Otherwise, with T the trace-weighted time sum_s w_s T_s
and r its relative standard error (from the per-shape RSEs of the interleaved timing):

    gain = 1 - T_candidate / T_incumbent
    accept  iff  gain > max(min_gain, sigmas * sqrt(r_candidate^2 + r_incumbent^2))

with min_gain 1 % and sigmas 3 by default. Both are measured by the same runner judge, interleaved
on the same GPU. An incumbent that is not verified (a broken baseline) is replaced by the first
verified candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from atrex.runner.evaluate import BEYOND_ROOFLINE
from atrex.runner.scoring import beyond_hardware

from .measure import Measurement


@dataclass(frozen=True)
class AcceptanceRule:
    min_gain: float = 0.01
    sigmas: float = 3.0
    beyond_roofline: float = BEYOND_ROOFLINE


@dataclass(frozen=True)
class Decision:
    accepted: bool
    reason: str
    gain: float | None = None  # 1 - T_candidate / T_incumbent
    threshold: float | None = None
    status: str | None = None  # a status the rule itself assigns (above roofline: suspicious)


def decide(candidate: Measurement, incumbent: Measurement | None,
           rule: AcceptanceRule = AcceptanceRule()) -> Decision:
    if not candidate.passed:
        return Decision(False, f"rejected: {candidate.status}"
                        + (f" ({candidate.message})" if candidate.message else ""))
    above = [s for s in candidate.shapes if beyond_hardware(s, rule.beyond_roofline)]
    if above:
        worst = max(above, key=lambda s: s.roofline_fraction)
        return Decision(False, f"rejected: suspicious, {worst.id} reads "
                        f"{worst.roofline_fraction:.2f} of roofline (faster than the hardware "
                        "floor)", status="suspicious")
    if incumbent is None or not incumbent.passed:
        return Decision(True, "accepted: first verified kernel (the incumbent is not verified)")
    return _speed_decision(candidate, incumbent, rule)


def _speed_decision(candidate: Measurement, incumbent: Measurement,
                    rule: AcceptanceRule) -> Decision:
    t_cand, t_inc = candidate.weighted_time_ms, incumbent.weighted_time_ms
    if t_cand is None or t_inc is None:
        return Decision(False, "not accepted: verified, but no timing on this device, so a gain "
                        "cannot be shown")
    gain = 1.0 - t_cand / t_inc
    noise = math.hypot(candidate.weighted_rse or 0.0, incumbent.weighted_rse or 0.0)
    threshold = max(rule.min_gain, rule.sigmas * noise)
    if gain > threshold:
        return Decision(True, f"accepted: {gain:.1%} faster than the incumbent (needed "
                        f">{threshold:.1%})", gain, threshold)
    verb = "slower" if gain < 0 else "faster"
    return Decision(False, f"not accepted: {abs(gain):.1%} {verb}, not a significant gain "
                    f"(needed >{threshold:.1%})", gain, threshold)
