"""Human renderings of a Report: Markdown (PR comment / job summary) and a terminal table."""

from __future__ import annotations

from .model import OpResult, Report, ShapeResult, Status

NA_NO_GPU = "n/a (no GPU)"

_STATUS_ICON = {
    Status.PASS: "✅", Status.INCORRECT: "❌", Status.FALLBACK: "🔁", Status.SUSPICIOUS: "🚩",
    Status.COMPILE_ERROR: "🛠️", Status.RUNTIME_ERROR: "💥", Status.TIMEOUT: "⏱️",
    Status.FORMAT_ERROR: "📄", Status.SKIPPED: "⏭️",
}


def fmt_fraction(value: float | None, timed: bool = True) -> str:
    if value is None:
        return "—" if timed else NA_NO_GPU
    return f"{value:.3f}"


def fmt_share(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0%}" if value >= 0.01 or value == 0 else f"{value:.2%}"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.3g} µs" if value < 1 else f"{value:.3f} ms"


def status_label(status: Status) -> str:
    return f"{_STATUS_ICON[status]} {status.value}"


def environment_line(report: Report) -> str:
    d = report.device
    parts = [d.name]
    if d.kind == "cuda":
        parts.append(f"driver {d.driver or '?'}")
        if d.sm_clock_mhz:
            parts.append(f"SM clock {d.sm_clock_mhz} MHz")
    else:
        parts.append(f"CPU only; SOL computed for {d.gpu_key}")
    parts += [f"torch {d.torch}", f"triton {d.triton or 'none'}", f"python {d.python}"]
    if d.peaks:
        parts.append(f"peaks ({d.peaks.source}): {d.peaks.bandwidth_tbps:g} TB/s, "
                     f"bf16 {d.peaks.tflops.get('bf16', 0):g} TFLOP/s")
    if d.peaks_measured:
        parts.append(f"measured ceilings: {d.peaks_measured.bandwidth_tbps:.2f} TB/s, "
                     f"bf16 {d.peaks_measured.tflops.get('bf16', 0):.0f} TFLOP/s")
    parts.append(f"sandbox {d.sandbox}")
    return " · ".join(parts)


def markdown(report: Report, title: str = "atrex kernel report") -> str:
    timed = report.timing_available
    lines = [f"## {title}", ""]
    lines.append(_headline(report))
    lines += ["", "| Operator | Status | Own-kernel share | Roofline fraction (GPU-hour) | "
              "Weight | Shapes |", "|---|---|---|---|---|---|"]
    for op in report.ops:
        passed = sum(s.status is Status.PASS for s in op.shapes)
        lines.append(f"| `{op.name}` | {status_label(op.status)} | "
                     f"{fmt_share(op.own_kernel_share)} | {fmt_fraction(op.score, timed)} | "
                     f"{fmt_share(op.importance)} | {passed}/{len(op.shapes)} pass |")
    for op in report.ops:
        lines += ["", *_op_details(op, timed)]
    if report.notes:
        lines += ["", *[f"> {note}" for note in report.notes]]
    lines += ["", f"<sub>{environment_line(report)} · report schema {report.schema_version}"
              "</sub>"]
    return "\n".join(lines) + "\n"


def _headline(report: Report) -> str:
    if not report.timing_available:
        return (f"**Status:** {status_label(report.status)} · **Score:** {NA_NO_GPU} "
                "(correctness and fallback checks only)")
    stake = report.gpu_hours_at_stake
    stake_text = "—" if stake is None else f"{stake:.3g} GPU-hours ({report.gpu_hours_unit})"
    return (f"**Status:** {status_label(report.status)} · **Repository score:** "
            f"{fmt_fraction(report.score)} (GPU-hour-weighted roofline fraction, "
            f"{report.device.peaks.source if report.device.peaks else 'no'} peaks) · "
            f"**GPU-hours at stake:** {stake_text}")


def _op_details(op: OpResult, timed: bool) -> list[str]:
    lines = [f"<details><summary><code>{op.name}</code>: {status_label(op.status)}</summary>", "",
             "| Shape | Status | Time | SOL | Roofline | Own share | Max abs err | Timing "
             "| Weight |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [_shape_row(shape, timed) for shape in op.shapes]
    if op.format_error:
        issue = op.format_error
        where = f"`{issue.file}`" + (f" field `{issue.field}`" if issue.field else "")
        lines += ["", f"Malformed operator: {where}: {_one_line(issue.message)}"]
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


def _shape_row(shape: ShapeResult, timed: bool) -> str:
    method = shape.timing_method or ("—" if timed else NA_NO_GPU)
    if (shape.timing_calls_per_sample or 1) > 1:
        method += f" ×{shape.timing_calls_per_sample} calls"
    if shape.timing_reps:
        method += f", {shape.timing_reps} reps, ±{(shape.timing_rse or 0):.1%}"
    error = "—" if shape.max_abs_error is None else f"{shape.max_abs_error:.2e}"
    return (f"| `{shape.id}` | {status_label(shape.status)} | {fmt_ms(shape.time_ms)} | "
            f"{fmt_ms(shape.sol_ms)} | {fmt_fraction(shape.roofline_fraction, timed)} | "
            f"{fmt_share(shape.own_kernel_share)} | {error} | {method} | {shape.weight:g} |")


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def terminal_table(report: Report):
    """A rich Table of the per-op results (imported lazily: rich is for terminals only)."""
    from rich.table import Table

    timed = report.timing_available
    table = Table(title="atrex check", show_lines=False)
    for column in ("op", "shape", "status", "time", "SOL", "roofline", "own share", "max err"):
        table.add_column(column, justify="left" if column in ("op", "shape", "status")
                         else "right")
    for op in report.ops:
        for index, shape in enumerate(op.shapes):
            error = "—" if shape.max_abs_error is None else f"{shape.max_abs_error:.1e}"
            table.add_row(op.name if index == 0 else "", shape.id, shape.status.value,
                          fmt_ms(shape.time_ms), fmt_ms(shape.sol_ms),
                          fmt_fraction(shape.roofline_fraction, timed),
                          fmt_share(shape.own_kernel_share), error)
        table.add_row("" if op.shapes else op.name, "[b]op[/b]", f"[b]{op.status.value}[/b]",
                      "", "",
                      f"[b]{fmt_fraction(op.score, timed)}[/b]", fmt_share(op.own_kernel_share),
                      "", end_section=True)
    return table
