"""Markdown for the sticky PR comment and the check run, from the runner's reports.

Pure functions of the reports and the judgement: no GitHub, no I/O. Every number may be missing
(`None`): on a machine without a GPU there is no timing, so no roofline fraction and no score, and
the text says "n/a (no GPU)" instead of inventing a value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from runner.model import DeviceInfo, Report, Status

from .trend import OpTrend, sparkline
from .verdict import FAILURE, NEUTRAL, STATUS_TEXT, SUCCESS, Judgement, OpComparison

STICKY_MARKER = "<!-- atrex:sticky -->"
CHECK_TEXT_LIMIT = 65535  # GitHub's limit on a check run's output.summary and output.text
COMMENT_LIMIT = 65536  # GitHub's limit on a comment body
CHART_MAX_OPS = 20
HEADLINE = {SUCCESS: "✅ success", FAILURE: "❌ failure", NEUTRAL: "➖ neutral"}
STATUS_ICON = {Status.PASS: "✅", Status.SKIPPED: "⏭️"}


@dataclass
class PrResult:
    """Everything one evaluation of a PR commit produced, ready to render."""

    head_sha: str
    base_sha: str | None
    judgement: Judgement
    head: Report | None = None
    base: Report | None = None
    removed: list[str] = field(default_factory=list)
    error: str | None = None  # the repository could not be evaluated (malformed, ...)
    job_id: int | None = None
    threshold: float = 0.05  # the repository's regression threshold the judgement used
    # the default branch's recent comparable fractions per changed operator (bot.prhistory)
    trend: list[OpTrend] = field(default_factory=list)
    trend_env: str | None = None  # the comparability class of the trend, as a label
    dashboard_url: str | None = None


def _na(report: Report | None) -> str:
    return "n/a (no GPU)" if report is not None and not report.timing_available else "n/a"


def fmt_fraction(value: float | None, na: str = "n/a") -> str:
    return na if value is None else f"{value:.3f}"


def fmt_share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def fmt_delta(delta: float | None, base: float | None) -> str:
    if delta is None:
        return "—"
    relative = f" ({delta / base:+.1%})" if base else ""
    return f"{delta:+.3f}{relative}"


def _short(sha: str | None) -> str:
    return f"`{sha[:12]}`" if sha else "?"


def op_table(result: PrResult) -> list[str]:
    na = _na(result.head)
    rows = ["| Operator | Status | Own-kernel share | Roofline fraction (base → head) | "
            "GPU-hour score | Δ score | Verdict |", "|---|---|---|---|---|---|---|"]
    for c in result.judgement.ops:
        base_frac = fmt_fraction(c.fraction_base, na) if c.base is not None else "new"
        status = f"{STATUS_ICON.get(c.head.status, '❌')} {STATUS_TEXT[c.head.status]}"
        rows.append(
            f"| {_code(c.name)} | {status} | {fmt_share(c.head.own_kernel_share)} | "
            f"{base_frac} → {fmt_fraction(c.fraction_head, na)} | "
            f"{fmt_fraction(c.head.score, na)} | "
            f"{fmt_delta(c.score_delta, c.base.score if c.base else None)} | {c.verdict} |")
    return rows


def repo_lines(result: PrResult) -> list[str]:
    head, base = result.head, result.base
    na = _na(head)
    score = fmt_fraction(head.score if head else None, na)
    if head and base and head.score is not None and base.score is not None:
        score += f" · base {base.score:.3f} · Δ {fmt_delta(head.score - base.score, base.score)}"
    stake = na
    if head and head.gpu_hours_at_stake is not None:
        stake = f"{head.gpu_hours_at_stake:.4g} GPU-hours ({head.gpu_hours_unit})"
        if base and base.gpu_hours_at_stake is not None:
            stake += f"; base {base.gpu_hours_at_stake:.4g}"
    return [f"**Score** (importance-weighted GPU-hour efficiency of the operators above): {score}",
            "", f"**GPU-hours at stake** (traced GPU time above the roofline floor): {stake}"]


def mermaid_chart(ops: list[OpComparison]) -> list[str]:
    """A Mermaid xychart of roofline fractions (bars: head, line: base); empty without timing."""
    timed = [c for c in ops if c.fraction_head is not None or c.fraction_base is not None]
    timed = sorted(timed, key=lambda c: -(c.head.importance or 0))[:CHART_MAX_OPS]
    if not timed:
        return []
    labels = ", ".join('"' + re.sub(r"[^\w.\-/]", "_", c.name) + '"' for c in timed)
    head = ", ".join(f"{c.fraction_head or 0:.3f}" for c in timed)
    base = ", ".join(f"{c.fraction_base or 0:.3f}" for c in timed)
    top = max(1.0, *(c.fraction_head or 0 for c in timed), *(c.fraction_base or 0 for c in timed))
    title = "bars: head, line: base" if all(c.fraction_base is not None for c in timed) else "head"
    lines = ["```mermaid", "xychart-beta", f'    title "Roofline fraction ({title})"',
             f"    x-axis [{labels}]", f'    y-axis "fraction of roofline" 0 --> {top:.2f}',
             f"    bar [{head}]"]
    if all(c.fraction_base is not None for c in timed):  # a line cannot skip a missing base
        lines.append(f"    line [{base}]")
    return [*lines, "```"]


def trend_section(result: PrResult) -> list[str]:
    """Per changed operator: the head's roofline fraction after the default branch's last
    comparable ones, as a sparkline; and the link to the repository's dashboard."""
    lines: list[str] = []
    shown = [t for t in result.trend if t.head is not None]
    if shown and any(t.last is not None for t in shown):
        points = max(len(t.branch) for t in shown)
        lines += [f"**Trend** (roofline fraction: the default branch's last {points} "
                  f"comparable evaluations, {result.trend_env or 'same GPU and peaks'}, "
                  "oldest → newest, then this head)", "",
                  "| Operator | Default branch → head | Range | Last | Head | Δ vs last |",
                  "|---|---|---|---|---|---|"]
        for t in shown:
            spark = sparkline([*t.branch, t.head])
            known = [v for v in t.branch if v is not None]
            span = f"{min(known):.3f}–{max(known):.3f}" if known else "—"
            change = "—" if t.change is None else f"{t.change:+.1%}"
            lines.append(f"| {_code(t.op)} | "
                         f"`{spark[:-1]}` → `{spark[-1]}` | {span} | "
                         f"{fmt_fraction(t.last)} | {fmt_fraction(t.head)} | {change} |")
    elif shown:
        lines.append(f"**Trend**: no comparable default-branch evaluation yet "
                     f"({result.trend_env or 'same GPU and peaks'}).")
    if result.dashboard_url:
        lines += ["", f"📈 [History of every operator on the dashboard]({result.dashboard_url})"]
    return lines


def shape_details(result: PrResult) -> list[str]:
    na = _na(result.head)
    rows = ["<details><summary>Shapes</summary>", "",
            "| Operator | Shape | Weight | Status | Time ms (base → head) | Floor ms | "
            "Roofline fraction (base → head) | Own-kernel share | Max abs error |",
            "|---|---|---|---|---|---|---|---|---|"]
    for c in result.judgement.ops:
        base_shapes = {s.id: s for s in c.base.shapes} if c.base else {}
        for s in c.head.shapes:
            b = base_shapes.get(s.id)
            rows.append(
                f"| {_code(c.name)} | {_code(s.id)} | {s.weight:.4g} | {STATUS_TEXT[s.status]} | "
                f"{_ms(b.time_ms if b else None, na)} → {_ms(s.time_ms, na)} | {_ms(s.sol_ms)} | "
                f"{fmt_fraction(b.roofline_fraction if b else None, na)} → "
                f"{fmt_fraction(s.roofline_fraction, na)} | {fmt_share(s.own_kernel_share)} | "
                f"{'n/a' if s.max_abs_error is None else f'{s.max_abs_error:.3g}'} |")
    return [*rows, "", "</details>"]


def _ms(value: float | None, na: str = "n/a") -> str:
    return na if value is None else f"{value:.4g}"


def findings(result: PrResult, limit: int = 50) -> list[str]:
    items = []
    for c in result.judgement.ops:
        if c.head.format_error:
            issue = c.head.format_error
            field = f" {_code(issue.field)}" if issue.field else ""
            items.append(f"- {_code(c.name)} format error in {_code(issue.file)}{field}: "
                         f"{_one_line(issue.message)}")
        for f in c.head.findings:
            where = f" {_code(f'{f.file}:{f.line}')}" if f.file else ""
            shape = f" (shape {_code(f.shape_id)})" if f.shape_id else ""
            items.append(f"- {_code(c.name)} {f.kind.value}{where}{shape}: {_one_line(f.message)}")
        for s in c.head.shapes:
            if s.status is not Status.PASS and s.message:
                items.append(f"- {_code(c.name)} shape {_code(s.id)} {STATUS_TEXT[s.status]}: "
                             f"{_one_line(s.message)}")
    if not items:
        return []
    more = [f"- … {len(items) - limit} more"] if len(items) > limit else []
    return ["<details><summary>Findings</summary>", "", *items[:limit], *more, "", "</details>"]


def _one_line(text: str, limit: int = 300) -> str:
    """Untrusted text (error messages from candidate code) as one harmless Markdown line."""
    text = " ".join(text.split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace("|", "\\|")
            .replace("@", "@\u200b"))


def _code(text: str) -> str:
    """A name from the repository (operator, shape, file) as inline code that cannot break out
    of a table cell or mention anyone."""
    return "`" + text.replace("`", "'").replace("|", "¦").replace("\n", " ") + "`"


one_line = _one_line  # for other renderers of untrusted text (agent replies)
code = _code


def environment(device: DeviceInfo | None) -> list[str]:
    if device is None:
        return []
    if device.kind == "cuda":
        gpu = f"{device.name}" + (f" (`{device.gpu_key}`)" if device.gpu_key else "")
    else:
        gpu = f"none: CPU-only evaluation on {device.name} (Triton interpreter, no timing)"
    parts = [f"GPU {gpu}", f"driver {device.driver or 'n/a'}", f"CUDA {device.cuda or 'n/a'}",
             f"torch {device.torch or 'n/a'}", f"Triton {device.triton or 'n/a'}",
             f"Python {device.python or 'n/a'}"]
    if device.kind == "cuda" and device.peaks is not None:
        parts.append(f"peaks: {device.peaks.source}")
    if device.sm_clock_mhz:
        parts.append(f"SM clock {device.sm_clock_mhz} MHz")
    return ["**Environment**: " + " · ".join(parts) + f" · sandbox: {device.sandbox}"]


def _notes(result: PrResult) -> list[str]:
    notes = list(result.head.notes) if result.head else []
    if result.removed:
        notes.append("Operators removed by this PR: " + ", ".join(f"`{r}`" for r in result.removed))
    return [""] + [f"> - {n}" for n in notes] if notes else []


def _sections(result: PrResult) -> list[list[str]]:
    """The body in order; later sections are dropped first when a limit forces it."""
    j = result.judgement
    head_line = [f"## atrex · {HEADLINE[j.conclusion]}", "",
                 f"{j.title} · head {_short(result.head_sha)} vs merge base "
                 f"{_short(result.base_sha)}"]
    if result.error:
        return [head_line, ["", "**The repository could not be evaluated:**", "", "```",
                            result.error[-3000:], "```"]]
    if not j.ops:
        return [head_line, ["", "No operator changed in this commit; nothing was evaluated."],
                _notes(result)]
    return [head_line, ["", *op_table(result)], ["", *repo_lines(result)],
            ["", *environment(result.head.device if result.head else None)],
            _notes(result), ["", *mermaid_chart(j.ops)], ["", *trend_section(result)],
            ["", *shape_details(result)], ["", *findings(result)]]


def _footer(result: PrResult) -> list[str]:
    head = result.head
    bits = [f"atrex {head.tool_version}" if head and head.tool_version else "atrex"]
    if head:
        bits.append(f"report schema {head.schema_version}")
    if result.job_id is not None:
        bits.append(f"job {result.job_id}")
    return ["", "<sub>" + " · ".join(bits) + "</sub>"]


def _fit(sections: Iterable[list[str]], footer: list[str], limit: int, required: int) -> str:
    """Join sections within `limit`: drop trailing optional sections first (saying so), then cut
    the `required` ones at a line boundary."""
    sections = [s for s in sections if any(line.strip() for line in s)]
    tail = "\n".join(footer)
    omitted = ["", "… (details omitted to fit GitHub's size limit)"]
    for keep in range(len(sections), min(required, len(sections)) - 1, -1):
        parts = sections[:keep] + ([omitted] if keep < len(sections) else [])
        text = "\n".join(line for s in parts for line in s) + "\n" + tail
        if len(text) <= limit:
            return text
    cut = "\n… (truncated to fit GitHub's size limit)\n"
    text = "\n".join(line for s in sections[:required] for line in s)
    room = max(0, limit - len(cut) - len(tail))
    end = text.rfind("\n", 0, room)
    return text[: end if end > 0 else room] + cut + tail


def comment_body(result: PrResult) -> str:
    return _fit([[STICKY_MARKER], *_sections(result)], _footer(result), COMMENT_LIMIT - 1, 3)


def check_output(result: PrResult) -> dict[str, str]:
    """The check run's output: title, summary (<= 65,535 characters) and the details as text."""
    sections = _sections(result)
    summary = _fit(sections[:5], _footer(result), CHECK_TEXT_LIMIT, 2)
    text = _fit(sections[5:], [], CHECK_TEXT_LIMIT, 1) if len(sections) > 5 else ""
    output = {"title": result.judgement.title[:255], "summary": summary}
    if text.strip():
        output["text"] = text
    return output
