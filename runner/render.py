"""Human renderings of a Report: Markdown (PR comment / job summary) and a terminal table.

Conventions, the same in every table:
- a value that does not exist is `n/a (<why>)`: `n/a (no GPU)` on a run without timing, the
  status (`n/a (incorrect)`) where a shape failed before it could be measured; a failing op's
  GPU-hour score is 0 by rule and says so (`0 (incorrect)`);
- a run without GPU timing shows no time, floor or roofline columns at all;
- weights are percentages, labelled: an operator's share of the repository's GPU time, a shape's
  share of its operator's calls;
- errors are the max absolute and the max relative error, side by side.
"""

from __future__ import annotations

from .model import OpResult, Report, ShapeResult, Status
from .scoring import draw_dependent

NA_NO_GPU = "n/a (no GPU)"

_STATUS_ICON = {
    Status.PASS: "✅", Status.INCORRECT: "❌", Status.FALLBACK: "🔁", Status.SUSPICIOUS: "🚩",
    Status.COMPILE_ERROR: "🛠️", Status.RUNTIME_ERROR: "💥", Status.TIMEOUT: "⏱️",
    Status.FORMAT_ERROR: "📄", Status.SKIPPED: "⏭️",
}


def na(reason: str) -> str:
    return f"n/a ({reason})"


def missing_reason(status: Status, timed: bool) -> str:
    """Why a number of a shape or op with this status is absent."""
    if status is not Status.PASS:
        return status.value
    return "not timed" if timed else "no GPU"


def fmt_fraction(value: float | None, status: Status = Status.PASS, timed: bool = True) -> str:
    if value is None:
        return na(missing_reason(status, timed))
    if status is not Status.PASS and value == 0:
        return f"0 ({status.value})"  # E_op is 0 by rule when a shape is not `pass`
    return f"{value:.3f}"


def fmt_share(value: float | None, status: Status = Status.PASS) -> str:
    if value is None:
        return na(status.value if status is not Status.PASS else "not measured")
    return f"{value:.0%}" if value >= 0.01 or value == 0 else f"{value:.2%}"


def fmt_ms(value: float | None, status: Status = Status.PASS, timed: bool = True) -> str:
    if value is None:
        return na(missing_reason(status, timed))
    return f"{value * 1000:.3g} µs" if value < 1 else f"{value:.3f} ms"


def fmt_errors(shape: ShapeResult) -> str:
    """Max absolute / max relative error; then the native-dtype reference's own max absolute
    error against the oracle, where it was measured (the tolerance grows with it)."""
    if shape.max_abs_error is None and shape.max_rel_error is None:
        return na(shape.status.value if shape.status is not Status.PASS else "not measured")
    parts = ["n/a" if v is None else f"{v:.2e}" for v in (shape.max_abs_error,
                                                           shape.max_rel_error)]
    own = "" if shape.reference_max_abs_error is None else \
        f" (reference {shape.reference_max_abs_error:.2e})"
    return " / ".join(parts) + own


def fmt_roofline(shape: ShapeResult) -> str:
    """The roofline fraction; for a launch-bound shape with a measured launch floor, also the
    time against max(SOL, that floor)."""
    text = fmt_fraction(shape.roofline_fraction, shape.status)
    if shape.launch_floor_fraction is not None:
        text += f" ({shape.launch_floor_fraction:.2f} of max(SOL, launch floor " \
                f"{shape.launch_floor_ms * 1000:.2g} µs))"
    return text


def fmt_percent(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0%}" if value >= 0.01 or value == 0 else f"{value:.2%}"


def shape_weight_shares(op: OpResult) -> dict[str, float]:
    """Each shape's share of its operator's calls (its weight over the op's total)."""
    total = sum(s.weight for s in op.shapes)
    return {s.id: (s.weight / total if total > 0 else 1 / len(op.shapes)) for s in op.shapes}


def status_label(status: Status) -> str:
    return f"{_STATUS_ICON[status]} {status.value}"


def environment_line(report: Report) -> str:
    d = report.device
    parts = [d.name]
    if d.kind == "cuda":
        parts.append(f"driver {d.driver or '?'}")
        if d.sm_clock_mhz:
            parts.append(f"SM clock {d.sm_clock_mhz} MHz")
        if d.uuid:  # cards of one model differ by a few percent: which one measured this
            parts.append(f"card {d.uuid}")
    else:
        parts.append(f"CPU only (no timing; a GPU run would use {d.gpu_key} peaks)")
    parts += [f"torch {d.torch}", f"triton {d.triton or 'none'}", f"python {d.python}"]
    if d.kind == "cuda" and d.peaks:
        parts.append(f"peaks ({d.peaks.source}): {d.peaks.bandwidth_tbps:g} TB/s, "
                     f"bf16 {d.peaks.tflops.get('bf16', 0):g} TFLOP/s")
    if d.kind == "cuda" and d.peaks_measured:
        parts.append(f"measured ceilings: {d.peaks_measured.bandwidth_tbps:.2f} TB/s, "
                     f"bf16 {d.peaks_measured.tflops.get('bf16', 0):.0f} TFLOP/s")
    parts.append(f"sandbox {d.sandbox}{_confinement(d)}")
    return " · ".join(parts)


def _confinement(d) -> str:
    if d.executor_writes_confined is None:
        return ""
    if d.executor_writes_confined:
        n = d.executor_hidden_paths
        hidden = f", {n} secret path{'s' if n > 1 else ''} hidden from reads" if n else ""
        return f", writes confined (Landlock ABI {d.executor_landlock_abi}){hidden}"
    return ", writes not confined (no Landlock)"


def markdown(report: Report, title: str = "atrex kernel report") -> str:
    timed = report.timing_available
    lines = [f"## {title}", "", _headline(report), "", *_op_table(report)]
    for op in report.ops:
        lines += ["", *_op_details(op, timed)]
    if report.notes:
        lines += ["", *[f"> {note}" for note in report.notes]]
    lines += ["", f"<sub>{environment_line(report)} · report schema {report.schema_version}"
              "</sub>"]
    return "\n".join(lines) + "\n"


def _op_table(report: Report) -> list[str]:
    timed = report.timing_available
    head = ["Operator", "Status", "Own-kernel share"]
    head += ["Roofline fraction (GPU-hour)"] if timed else []
    head += ["Weight (% of GPU time)", "Shapes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op in report.ops:
        passed = sum(s.status is Status.PASS for s in op.shapes)
        cells = [f"`{op.name}`", status_label(op.status),
                 fmt_share(op.own_kernel_share, op.status)]
        cells += [fmt_fraction(op.score, op.status, timed)] if timed else []
        cells += [fmt_percent(op.importance), f"{passed}/{len(op.shapes)} pass"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "<sub>Weight: the operator's share of the repository's GPU time; in the shape "
              "tables, the shape's share of its operator's calls. Max error: absolute / relative, "
              "against the reference (float64 where it runs).</sub>"]
    return lines


def _headline(report: Report) -> str:
    if not report.timing_available:
        return (f"**Status:** {status_label(report.status)} · **Score:** {NA_NO_GPU}: "
                "correctness and fallback checks only")
    stake = report.gpu_hours_at_stake
    stake_text = (na("an operator is not pass" if report.status is not Status.PASS else
                     "not timed") if stake is None else
                  f"{stake:.3g} GPU-hours ({report.gpu_hours_unit})")
    score = fmt_fraction(report.score, Status.PASS, True)
    return (f"**Status:** {status_label(report.status)} · **Repository score:** {score} "
            f"(GPU-hour-weighted roofline fraction, "
            f"{report.device.peaks.source if report.device.peaks else 'no'} peaks) · "
            f"**GPU-hours at stake:** {stake_text}")


def _op_details(op: OpResult, timed: bool) -> list[str]:
    head = ["Shape", "Status"]
    head += ["Time", "Floor (SOL)", "Roofline"] if timed else []
    head += ["Own share", "Max error (abs / rel)"]
    head += ["Timing"] if timed else []
    head += ["Weight (% of calls)"]
    lines = [f"<details><summary><code>{op.name}</code>: {status_label(op.status)}</summary>", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    shares = shape_weight_shares(op)
    lines += [_shape_row(shape, timed, shares[shape.id]) for shape in op.shapes]
    if op.format_error:
        issue = op.format_error
        where = f"`{issue.file}`" + (f" field `{issue.field}`" if issue.field else "")
        lines += ["", f"Malformed operator: {where}: {_one_line(issue.message)}"]
    varying = [s for s in op.shapes if draw_dependent(s.time_ms, s.timing_new_values_ms)]
    if timed and varying:
        lines += ["", "Times that depend on the input values (they hold for the judged draw "
                  "only):"]
        lines += [f"- `{s.id}`: {fmt_ms(s.time_ms)} a call on the timed draw, "
                  f"{fmt_ms(s.timing_new_values_ms)} on new values" for s in varying]
    skipped = [s for s in op.shapes if s.status is Status.SKIPPED]
    if skipped:
        lines += ["", "Skipped:"]
        lines += [f"- `{s.id}`: {_one_line(s.message or 'not evaluated')}" for s in skipped]
    if op.findings:
        lines += ["", "Findings:"]
        for finding in op.findings:
            where = f"`{finding.file}:{finding.line}` " if finding.file else ""
            shape = f" (shape {finding.shape_id})" if finding.shape_id else ""
            lines.append(f"- **{finding.kind.value}** {where}{_one_line(finding.message)}{shape}")
    lines += ["", "</details>"]
    return lines


def _shape_row(shape: ShapeResult, timed: bool, weight_share: float) -> str:
    cells = [f"`{shape.id}`", status_label(shape.status)]
    if timed:
        cells += [fmt_ms(shape.time_ms, shape.status), _floor(shape), fmt_roofline(shape)]
    cells += [fmt_share(shape.own_kernel_share, shape.status), fmt_errors(shape)]
    if timed:
        cells.append(_timing(shape))
    cells.append(fmt_percent(weight_share))
    return "| " + " | ".join(cells) + " |"


def _floor(shape: ShapeResult) -> str:
    return na("no work or peaks") if shape.sol_ms is None else fmt_ms(shape.sol_ms)


def _timing(shape: ShapeResult) -> str:
    if shape.timing_method is None:
        return na(missing_reason(shape.status, True))
    method = shape.timing_method
    if (shape.timing_calls_per_sample or 1) > 1:
        method += f" ×{shape.timing_calls_per_sample} calls"
    if shape.timing_reps:
        method += f", {shape.timing_reps} reps, ±{(shape.timing_rse or 0):.1%}"
    if shape.timing_spread is not None:
        method += f", spread {shape.timing_spread:.1%}"
    return method + clock_text(shape)


def clock_text(shape: ShapeResult) -> str:
    """The SM clock the shape's repetitions ran at, and what held it down, if anything."""
    if shape.timing_sm_clock_mhz is None:
        return ""
    text = f", SM {shape.timing_sm_clock_mhz:.0f} MHz"
    low, high = shape.timing_sm_clock_range_mhz or (None, None)
    if low is not None and high is not None and low != high:
        text += f" ({low}-{high})"
    if shape.timing_slowdowns:
        text += f", clock held down: {', '.join(shape.timing_slowdowns)}"
    return text


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def terminal_table(report: Report):
    """A rich Table of the per-op results (imported lazily: rich is for terminals only)."""
    from rich.table import Table

    timed = report.timing_available
    columns = ["op", "shape", "status"] + (["time", "SOL", "roofline"] if timed else []) + \
        ["own share", "max err abs / rel"]
    table = Table(title="atrex check", show_lines=False)
    for column in columns:
        table.add_column(column, justify="left" if column in ("op", "shape", "status")
                         else "right")
    for op in report.ops:
        for index, shape in enumerate(op.shapes):
            cells = [op.name if index == 0 else "", shape.id, shape.status.value]
            if timed:
                cells += [fmt_ms(shape.time_ms, shape.status), _floor(shape),
                          fmt_roofline(shape)]
            cells += [fmt_share(shape.own_kernel_share, shape.status), fmt_errors(shape)]
            table.add_row(*cells)
        total = ["" if op.shapes else op.name, "[b]op[/b]", f"[b]{op.status.value}[/b]"]
        if timed:
            total += ["", "", f"[b]{fmt_fraction(op.score, op.status)}[/b]"]
        total += [fmt_share(op.own_kernel_share, op.status), ""]
        table.add_row(*total, end_section=True)
    return table
