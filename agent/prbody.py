"""The PR title and body: before/after table, per-shape numbers, environment, attempt log."""

from __future__ import annotations

from collections import Counter

from .loop import OptimizeResult
from .measure import Measurement
from .pr import marker_for


def _f(value, fmt: str = "{:.3f}") -> str:
    return "–" if value is None else fmt.format(value)


def title_for(result: OptimizeResult) -> str:
    before, after = result.before.roofline_fraction, result.after.roofline_fraction
    if before is not None and after is not None:
        return f"atrex: faster `{result.op}` kernel (roofline {before:.2f} -> {after:.2f})"
    if not result.before.passed:
        return f"atrex: verified `{result.op}` kernel (baseline was {result.before.status})"
    return f"atrex: optimized `{result.op}` kernel"


def render_body(result: OptimizeResult, trigger: str, pr_number: int | None = None,
                note: str | None = None) -> str:
    """The PR body; `note` is the caller's extra paragraph (e.g. why a schedule chose the op)."""
    parts = [marker_for(result.op), f"## atrex: faster `{result.op}` kernel", _intro(
        result, trigger, pr_number), note, before_after_table(result), _shapes(result),
        _verification(result), _environment(result), _attempts(result)]
    return "\n\n".join(p for p in parts if p) + "\n"


def _intro(result: OptimizeResult, trigger: str, pr_number: int | None) -> str:
    origin = (f"Requested with `/atrex optimize` in #{pr_number}." if trigger == "command"
              and pr_number else "Opened by atrex's scheduled optimization run.")
    t0, t1 = result.before.weighted_time_ms, result.after.weighted_time_ms
    if t0 and t1:
        change = f"a kernel **{t0 / t1:.2f}x faster** on the operator's traced shape mix"
    elif not result.before.passed:
        change = f"a verified kernel (the current one is `{result.before.status}`)"
    else:
        change = "a verified kernel"
    return f"{origin} The agent found {change}; {result.final_decision.reason}."


def _stake(result: OptimizeResult, label: str):
    report = result.reports.get(label)
    if report is None:
        return None, None
    op = report.op(result.op)
    return op.score, op.gpu_hours_at_stake


def before_after_table(result: OptimizeResult) -> str:
    """Status, own-kernel share, roofline fraction, GPU-hour score and time, before and after."""
    b, a = result.before, result.after
    score_b, stake_b = _stake(result, "before")
    score_a, stake_a = _stake(result, "after")
    rows = [
        ("status", b.status, a.status),
        ("own-kernel share", _f(b.own_kernel_share, "{:.2f}"), _f(a.own_kernel_share, "{:.2f}")),
        ("roofline fraction (per shape, min-max)", _range(b), _range(a)),
        ("GPU-hour score E_op", _f(score_b if score_b is not None else b.roofline_fraction),
         _f(score_a if score_a is not None else a.roofline_fraction)),
        ("GPU-hours at stake (per traced call mix)", _f(stake_b, "{:.3g}"),
         _f(stake_a, "{:.3g}")),
        ("weighted time", _f(b.weighted_time_ms, "{:.4g} ms"), _f(a.weighted_time_ms,
                                                                    "{:.4g} ms")),
    ]
    lines = ["| | before | after |", "|---|---|---|"]
    lines += [f"| {name} | {x} | {y} |" for name, x, y in rows]
    return "\n".join(lines)


def _range(m: Measurement) -> str:
    values = [s.roofline_fraction for s in m.shapes if s.roofline_fraction is not None]
    if not values:
        return "–"
    low, high = min(values), max(values)
    return f"{low:.3f}" if abs(high - low) < 5e-4 else f"{low:.3f}–{high:.3f}"


def _shapes(result: OptimizeResult) -> str:
    after = {s.id: s for s in result.after.shapes}
    lines = ["| shape | weight | before | after | speedup | roofline before -> after |",
             "|---|---|---|---|---|---|"]
    for s in result.before.shapes:
        t = after.get(s.id)
        speed = _f(s.time_ms / t.time_ms, "{:.2f}x") if t and s.time_ms and t.time_ms else "–"
        lines.append(f"| `{s.id}` | {s.weight:g} | {_f(s.time_ms, '{:.4g} ms')} | "
                     f"{_f(t.time_ms if t else None, '{:.4g} ms')} | {speed} | "
                     f"{_f(s.roofline_fraction)} -> {_f(t.roofline_fraction if t else None)} |")
    return "\n".join(lines)


def _verification(result: OptimizeResult) -> str:
    source = result.after.timing_source
    timing = {"runner": "timed by the runner with CUDA events, L2 flushed, interleaved A B A B "
                        "with the current kernel on the same GPU",
              "injected": "timing INJECTED by a test harness (no GPU): not a measurement"}.get(
        source, "not timed on this machine")
    return ("**Verification.** The new kernel passed the runner exactly as a human PR would: "
            "correctness on fresh random inputs against the float64 reference, fallback "
            "detection (dispatch tracing, device profile, ghost replay) and anti-cheat checks; "
            f"{timing}. Accepted only with a gain above max(1%, 3x the combined timing error).")


def _environment(result: OptimizeResult) -> str:
    d = result.device
    if d is None:
        return ""
    items = [("device", d.name), ("driver", d.driver), ("CUDA", d.cuda), ("torch", d.torch),
             ("triton", d.triton), ("python", d.python), ("SM clock", d.sm_clock_mhz and
                                                          f"{d.sm_clock_mhz} MHz")]
    text = ", ".join(f"{k} {v}" for k, v in items if v)
    return f"**Environment.** {text}."


def _attempts(result: OptimizeResult) -> str:
    attempts = [a for a in result.attempts if a.iteration > 0]
    counts = Counter(a.status for a in attempts)
    accepted = [a for a in attempts if a.accepted]
    dropouts = [a for a in attempts if a.dropout]
    lines = [f"**Attempt log.** {len(attempts)} attempts ("
             + ", ".join(f"{n} {s}" for s, n in counts.most_common()) + f"), {len(accepted)} "
             f"accepted, {len(dropouts)} dropout restart(s); stopped: {result.stop_reason}; "
             f"{result.gpu_seconds / 60:.1f} device-minutes, {result.tokens} LLM tokens.",
             "", "<details><summary>All attempts</summary>", "",
             "| # | round | proposer | status | roofline | gain | accepted | change |",
             "|---|---|---|---|---|---|---|---|"]
    for a in attempts:
        summary = a.summary.replace("|", "\\|")[:90]
        lines.append(f"| {a.attempt} | {a.iteration} | {a.proposer} | {a.status} | "
                     f"{_f(a.roofline_fraction)} | {_f(a.gain, '{:+.1%}')} | "
                     f"{'yes' if a.accepted else ''} | {summary} |")
    lines += ["", "</details>"]
    return "\n".join(lines)
