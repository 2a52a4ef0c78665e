"""Markdown for the sticky PR comment and the check run, from the runner's reports.

Pure functions of the reports and the judgement: no GitHub, no I/O. Every number may be missing
(`None`): on a machine without a GPU there is no timing, so no roofline fraction and no score, and
the text says "n/a (no GPU)" instead of inventing a value. Every text is fitted to GitHub's limits
in UTF-8 bytes (the report is full of multi-byte symbols: 800 operators made 65,462 characters but
69,617 bytes), cut at row boundaries, with a line saying what was left out and where the full
report is.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from atrex.runner.model import DeviceInfo, Report, Status

from .judging import ACTION_REQUIRED, JudgingReport
from .render_judging import judging_section
from .trend import OpTrend, sparkline
from .verdict import (
    FAILURE,
    NEUTRAL,
    STATUS_TEXT,
    SUCCESS,
    Judgement,
    NotEvaluated,
    OpComparison,
)

STICKY_MARKER = "<!-- atrex:sticky -->"
CHECK_TEXT_LIMIT = 65535  # bytes: GitHub's limit on a check run's output.summary and output.text
COMMENT_LIMIT = 65536  # bytes: GitHub's limit on a comment body
CHART_MAX_OPS = 20
HEADLINE = {SUCCESS: "✅ success", FAILURE: "❌ failure", NEUTRAL: "➖ neutral",
            ACTION_REQUIRED: "⏸️ action required"}
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
    judging: JudgingReport | None = None  # changes to what judges a kernel (bot.judging)
    # the default branch's recent comparable fractions per changed operator (bot.prhistory)
    trend: list[OpTrend] = field(default_factory=list)
    trend_env: str | None = None  # the comparability class of the trend, as a label
    dashboard_url: str | None = None
    # declared shapes of the changed operators this evaluation did not run (and why)
    not_evaluated: list[NotEvaluated] = field(default_factory=list)

    @property
    def worth_a_comment(self) -> bool:
        """Something changed that the PR's readers should see (else: no new sticky comment)."""
        return bool(self.error or self.judgement.ops or self.not_evaluated
                    or (self.judging is not None and self.judging.changes))


def _na(report: Report | None) -> str:
    return "n/a (no GPU)" if report is not None and not report.timing_available else "n/a"


def decimal(value: float, places: int = 3) -> str:
    """Fixed point with `places` decimals, or more where that would print a tiny non-zero value
    as zero: 0.0003 is "0.00030", not "0.000" (two significant digits)."""
    if value == 0 or abs(value) >= 0.5 * 10 ** -places:
        return f"{value:.{places}f}"
    return f"{value:.{min(15, 1 - math.floor(math.log10(abs(value))))}f}"


def fmt_fraction(value: float | None, na: str = "n/a") -> str:
    return na if value is None else decimal(value)


def fmt_share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def fmt_delta(delta: float | None, base: float | None) -> str:
    if delta is None:
        return "—"
    relative = f" ({delta / base:+.1%})" if base else ""
    sign = "+" if delta >= 0 else ""
    return f"{sign}{decimal(delta)}{relative}"


def _short(sha: str | None) -> str:
    return f"`{sha[:12]}`" if sha else "?"


# --- sections --------------------------------------------------------------------------------

@dataclass
class Section:
    """A part of a text. `rows` may be cut from the end to fit a limit (table rows, list items);
    `keep` sections are short by construction and never left out. Lower `priority` is given room
    first, whatever the order of the text."""

    name: str  # how the line about what was left out names it
    head: list[str]
    rows: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    keep: bool = False
    priority: int = 0
    unit: str = "rows"

    def lines(self, rows: int | None = None) -> list[str]:
        return [*self.head, *(self.rows if rows is None else self.rows[:rows]), *self.tail]


def _kept(name: str, lines: list[str]) -> Section:
    return Section(name, lines, keep=True)


def op_table(result: PrResult) -> Section:
    na = _na(result.head)
    head = ["", "| Operator | Status | Own-kernel share | Roofline fraction (base → head) | "
            "GPU-hour score | Δ score | Verdict |", "|---|---|---|---|---|---|---|"]
    rows = []
    for c in result.judgement.ops:
        base_frac = fmt_fraction(c.fraction_base, na) if c.base is not None else "new"
        status = f"{STATUS_ICON.get(c.head.status, '❌')} {STATUS_TEXT[c.head.status]}"
        rows.append(
            f"| {_code(c.name)} | {status} | {fmt_share(c.head.own_kernel_share)} | "
            f"{base_frac} → {fmt_fraction(c.fraction_head, na)} | "
            f"{fmt_fraction(c.head.score, na)} | "
            f"{fmt_delta(c.score_delta, c.base.score if c.base else None)} | {c.verdict} |")
    return Section("the operator table", head, rows, priority=1)


def repo_lines(result: PrResult) -> list[str]:
    head, base = result.head, result.base
    na = _na(head)
    score = fmt_fraction(head.score if head else None, na)
    if head and base and head.score is not None and base.score is not None:
        score += f" · base {decimal(base.score)} · Δ " \
                 f"{fmt_delta(head.score - base.score, base.score)}"
    stake = na
    if head and head.gpu_hours_at_stake is not None:
        stake = f"{head.gpu_hours_at_stake:.4g} GPU-hours ({head.gpu_hours_unit})"
        if base and base.gpu_hours_at_stake is not None:
            stake += f"; base {base.gpu_hours_at_stake:.4g}"
    return ["", "**Score** (importance-weighted GPU-hour efficiency of the operators above): "
            f"{score}", "", "**GPU-hours at stake** (traced GPU time above the roofline floor): "
            f"{stake}"]


def _pairs_text(pairs: list[tuple[str, str]], max_ops: int = 8, max_shapes: int = 12) -> str:
    """(operator, shape) pairs as a short line: per operator when few, else counted by shape."""
    by_op: dict[str, list[str]] = {}
    for op, shape in pairs:
        by_op.setdefault(op, []).append(shape)
    if len(by_op) <= max_ops:
        parts = []
        for op, shapes in by_op.items():
            more = f" and {len(shapes) - max_shapes} more" if len(shapes) > max_shapes else ""
            parts.append(f"{_code(op)}: " + ", ".join(map(_code, shapes[:max_shapes])) + more)
        return "; ".join(parts)
    counts = Counter(shape for _, shape in pairs)
    listed = ", ".join(f"{_code(shape)} ×{n}" for shape, n in counts.most_common(max_shapes))
    more = f" and {len(counts) - max_shapes} other shape ids" if len(counts) > max_shapes else ""
    return f"{len(pairs)} shapes of {len(by_op)} operators: {listed}{more}"


def coverage(result: PrResult) -> list[str]:
    """Which shapes of the changed operators were evaluated, where, and which were not (why)."""
    head = result.head
    ran = [(op.name, s.id) for op in head.ops for s in op.shapes] if head else []
    lines = []
    if ran:
        lines += ["", f"**Shapes evaluated** {_where(head.device)}: {_pairs_text(ran)}"]
    by_reason: dict[str, list[tuple[str, str]]] = {}
    for n in result.not_evaluated:
        by_reason.setdefault(n.reason, []).append((n.op, n.shape))
    for reason, pairs in by_reason.items():
        lines += ["", f"**Not evaluated** ({_one_line(reason)}): {_pairs_text(pairs)}"]
    return lines


def _where(device: DeviceInfo) -> str:
    if device.kind == "cuda":
        return f"on {_one_line(device.name)}"
    return f"on the CPU ({_one_line(device.name)}; Triton interpreter, nothing timed)"


def mermaid_chart(ops: list[OpComparison]) -> list[str]:
    """Mermaid xycharts of roofline fractions: operators with a base (bars: head, line: base),
    then operators without one (new, or failing at base) in their own chart, since a line cannot
    skip a point. A failed operator has no fraction of its own kernel to draw: it is named, not
    drawn as 0. Empty without timing."""
    timed = [c for c in ops if c.fraction_head is not None or c.fraction_base is not None]
    if not timed:
        return []
    ranked = sorted(timed, key=lambda c: -(c.head.importance or 0))
    drawable = [c for c in ranked if c.head.status is Status.PASS
                and c.fraction_head is not None][:CHART_MAX_OPS]
    paired = [c for c in drawable if c.fraction_base is not None]
    alone = [c for c in drawable if c.fraction_base is None]
    lines = []
    if paired:
        lines += _xychart("Roofline fraction (bars: head, line: base)", paired, line=True)
    if alone:
        lines += _xychart("Roofline fraction, head only (no base to compare)", alone, line=False)
    missing = [c for c in ranked if c.head.status is not Status.PASS or c.fraction_head is None]
    if missing:
        lines += ["", "Not drawn: " + ", ".join(
            f"{_code(c.name)} ({STATUS_TEXT[c.head.status]})" for c in missing[:CHART_MAX_OPS])
            + (f" and {len(missing) - CHART_MAX_OPS} more" if len(missing) > CHART_MAX_OPS
               else "")]
    return lines


def _xychart(title: str, ops: list[OpComparison], line: bool) -> list[str]:
    labels = ", ".join('"' + re.sub(r"[^\w.\-/]", "_", c.name) + '"' for c in ops)
    values = [c.fraction_head for c in ops] + ([c.fraction_base for c in ops] if line else [])
    top = max(1.0, *values)
    chart = ["```mermaid", "xychart-beta", f'    title "{title}"', f"    x-axis [{labels}]",
             f'    y-axis "fraction of roofline" 0 --> {top:.2f}',
             f"    bar [{', '.join(decimal(c.fraction_head) for c in ops)}]"]
    if line:
        chart.append(f"    line [{', '.join(decimal(c.fraction_base) for c in ops)}]")
    return [*chart, "```"]


def trend_section(result: PrResult) -> Section:
    """Per changed operator: the head's roofline fraction after the default branch's last
    comparable ones, as a sparkline; and the link to the repository's dashboard."""
    head: list[str] = []
    rows: list[str] = []
    shown = [t for t in result.trend if t.head is not None]
    if shown and any(t.last is not None for t in shown):
        points = max(len(t.branch) for t in shown)
        head = ["", f"**Trend** (roofline fraction: the default branch's last {points} "
                f"comparable evaluations, {result.trend_env or 'same GPU and peaks'}, "
                "oldest → newest, then this head)", "",
                "| Operator | Default branch → head | Range | Last | Head | Δ vs last |",
                "|---|---|---|---|---|---|"]
        for t in shown:
            spark = sparkline([*t.branch, t.head])
            known = [v for v in t.branch if v is not None]
            span = f"{decimal(min(known))}–{decimal(max(known))}" if known else "—"
            change = "—" if t.change is None else f"{t.change:+.1%}"
            rows.append(f"| {_code(t.op)} | "
                        f"`{spark[:-1]}` → `{spark[-1]}` | {span} | "
                        f"{fmt_fraction(t.last)} | {fmt_fraction(t.head)} | {change} |")
    elif shown:
        head = ["", f"**Trend**: no comparable default-branch evaluation yet "
                f"({result.trend_env or 'same GPU and peaks'})."]
    tail = ["", f"📈 [History of every operator on the dashboard]({result.dashboard_url})"] \
        if result.dashboard_url else []
    return Section("the trend", head, rows, tail, priority=4)


def shape_details(result: PrResult) -> Section:
    na = _na(result.head)
    head = ["", "<details><summary>Shapes</summary>", "",
            "| Operator | Shape | Weight | Status | Time ms (base → head) | Floor ms | "
            "Roofline fraction (base → head) | Own-kernel share | Max abs error |",
            "|---|---|---|---|---|---|---|---|---|"]
    rows = []
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
    return Section("the shape table", head, rows, ["", "</details>"], priority=4)


def _ms(value: float | None, na: str = "n/a") -> str:
    return na if value is None else f"{value:.4g}"


def findings(result: PrResult) -> Section:
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
    head = ["", "<details><summary>Findings</summary>", ""] if items else []
    return Section("the findings", head, items, ["", "</details>"] if items else [], priority=5,
                   unit="items")


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
        parts = [f"GPU {gpu}", f"driver {device.driver or 'n/a'}",
                 f"CUDA {device.cuda or 'n/a'}"]
    else:
        parts = [f"no GPU: CPU-only evaluation on {device.name} (Triton interpreter, nothing "
                 "timed)"]
    parts += [f"torch {device.torch or 'n/a'}", f"Triton {device.triton or 'n/a'}",
              f"Python {device.python or 'n/a'}"]
    if device.kind == "cuda" and device.peaks is not None:
        parts.append(f"peaks: {device.peaks.source}")
    if device.sm_clock_mhz:
        parts.append(f"SM clock {device.sm_clock_mhz} MHz")
    if device.uuid:  # cards of one model differ by a few percent: which one measured this
        parts.append(f"card {device.uuid}")
    return ["", "**Environment**: " + " · ".join(parts) + f" · sandbox: {device.sandbox}"]


CLOCK_GAP = 0.02  # base and head timed at SM clocks this far apart: their delta is suspect


def clock_notes(result: PrResult) -> list[str]:
    """Shapes whose head timing ran with the clock held down, or at an SM clock more than
    CLOCK_GAP from the base's: a speed-up or a regression there may be the card's, not the
    kernel's (runner/judge/clocks.py)."""
    notes = []
    for c in result.judgement.ops:
        base = {s.id: s for s in c.base.shapes} if c.base else {}
        for s in c.head.shapes:
            b = base.get(s.id)
            why = []
            if s.timing_slowdowns:
                why.append(f"clock held down ({', '.join(s.timing_slowdowns)})")
            if b is not None and b.timing_sm_clock_mhz and s.timing_sm_clock_mhz and abs(
                    s.timing_sm_clock_mhz / b.timing_sm_clock_mhz - 1) > CLOCK_GAP:
                why.append(f"SM clock {b.timing_sm_clock_mhz:.0f} MHz on the base, "
                           f"{s.timing_sm_clock_mhz:.0f} on the head")
            if why:
                notes.append(f"{_code(c.name)} {_code(s.id)} timed with {'; '.join(why)}: "
                             "compare its times with care")
    return notes


def _notes(result: PrResult) -> Section:
    notes = (list(result.head.notes) if result.head else []) + clock_notes(result)
    if result.removed:
        notes.append("Operators removed by this PR: " + ", ".join(f"`{r}`" for r in result.removed))
    return Section("the notes", [""] if notes else [], [f"> - {n}" for n in notes], priority=2,
                   unit="notes")


def _headline(result: PrResult) -> list[Section]:
    j = result.judgement
    head = [f"## atrex · {HEADLINE[j.conclusion]}", "",
            f"{j.title} · head {_short(result.head_sha)} vs merge base {_short(result.base_sha)}"]
    if j.conclusion == NEUTRAL and j.reason:
        head += ["", f"**Why neutral**: {j.reason}."]
    return [_kept("the headline", head)]


def _summary_sections(result: PrResult) -> list[Section]:
    """What the comment and the check run's summary show, in order."""
    j = result.judgement
    if result.error:
        return [*_headline(result), _kept("the error", [
            "", "**The repository could not be evaluated:**", "", "```", result.error[-3000:],
            "```"])]
    judging = judging_section(result.judging, result.head_sha)
    if not j.ops and not result.not_evaluated:
        return [*_headline(result), judging, _kept("the message", [
            "", "No operator changed in this commit; nothing was evaluated."]), _notes(result)]
    return [*_headline(result), judging, op_table(result),
            _kept("the score", repo_lines(result) if j.ops else []),
            _kept("the shapes evaluated", coverage(result)),
            _kept("the environment", environment(result.head.device if result.head else None)),
            _notes(result)]


def _detail_sections(result: PrResult) -> list[Section]:
    """What the comment shows after the summary, and the check run keeps in its text."""
    if result.error or not result.judgement.ops:
        return []
    chart = mermaid_chart(result.judgement.ops)
    return [Section("the chart", ([""] + chart) if chart else [], priority=3),
            trend_section(result), shape_details(result), findings(result)]


def _footer(result: PrResult) -> list[str]:
    head = result.head
    bits = [f"atrex {head.tool_version}" if head and head.tool_version else "atrex"]
    if head:
        bits.append(f"report schema {head.schema_version}")
    if result.job_id is not None:
        bits.append(f"job {result.job_id}")
    return ["", "<sub>" + " · ".join(bits) + "</sub>"]


# --- fitting GitHub's limits -----------------------------------------------------------------

def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _size(lines: list[str]) -> int:
    return sum(utf8_len(line) + 1 for line in lines)


def _join(blocks: list[list[str]], footer: list[str]) -> str:
    body = "\n".join(line for block in blocks for line in block)
    return body + ("\n" + "\n".join(footer) if footer else "")


NOTE_RESERVE = 1024  # bytes kept for the line saying what was left out


FullReport = str | Callable[[], str]  # where the full report is (asked only when needed)


def fit(sections: list[Section], footer: list[str], limit: int, full_report: FullReport) -> str:
    """Join `sections` within `limit` UTF-8 bytes. When they do not fit, the sections are given
    room by priority (`keep` ones first, whole), the others whole or cut at a row boundary or
    left out, and a line says what was left out and where the full report is."""
    full = _join([s.lines() for s in sections], footer)
    if utf8_len(full) <= limit:
        return full
    if callable(full_report):
        full_report = full_report()
    budget = limit - NOTE_RESERVE - _size(footer) - sum(_size(s.lines()) for s in sections
                                                         if s.keep)
    shown: dict[int, int | None] = {}  # section index -> rows shown (None: all)
    left_out: list[tuple[int, str]] = []
    for i in sorted((i for i, s in enumerate(sections) if not s.keep),
                    key=lambda i: sections[i].priority):
        s = sections[i]
        if _size(s.lines()) <= budget:
            shown[i], budget = None, budget - _size(s.lines())
            continue
        rows, used = 0, _size(s.head + s.tail)
        while rows < len(s.rows) and used + _size([s.rows[rows]]) <= budget:
            used += _size([s.rows[rows]])
            rows += 1
        if rows:
            shown[i], budget = rows, budget - used
            left_out.append((i, f"{len(s.rows) - rows} of {len(s.rows)} {s.unit} of {s.name}"))
        else:
            left_out.append((i, s.name))
    blocks = [s.lines(shown.get(i)) for i, s in enumerate(sections) if s.keep or i in shown]
    what = "; ".join(text for _, text in sorted(left_out))
    note = ["", f"**Left out to fit GitHub's {limit:,}-byte limit**: {what}. "
            f"The full report: {full_report}."]
    text = _join([*blocks, note], footer)
    return text if utf8_len(text) <= limit else _cut(text, limit, full_report)


def _cut(text: str, limit: int, full_report: str) -> str:
    """Last resort (the kept sections alone are too long): cut at a line boundary."""
    if utf8_len(text) <= limit:
        return text
    cut = f"\n… (cut at GitHub's {limit:,}-byte limit; the full report: {full_report})"
    room = limit - utf8_len(cut)
    raw = text.encode("utf-8")[:max(0, room)]
    end = raw.rfind(b"\n")
    return raw[:end if end > 0 else 0].decode("utf-8", errors="ignore") + cut


def fit_text(text: str, limit: int, full_report: str) -> str:
    """Any Markdown text (a reply) within `limit` UTF-8 bytes: whole lines, an open code fence
    closed, and a line saying how much was left out and where the rest is."""
    if utf8_len(text) <= limit:
        return text
    lines, kept, used = text.split("\n"), [], NOTE_RESERVE
    for line in lines:
        if used + utf8_len(line) + 1 > limit:
            break
        kept.append(line)
        used += utf8_len(line) + 1
    if sum(line.lstrip().startswith("```") for line in kept) % 2:
        kept.append("```")
    note = (f"**Left out to fit GitHub's {limit:,}-byte limit**: the last "
            f"{len(lines) - len(kept)} of {len(lines)} lines; the rest: {full_report}.")
    return _cut("\n".join([*kept, "", note]), limit, full_report)


def default_full_report(result: PrResult) -> str:
    if result.job_id is not None:
        return (f"`atrex job-report {result.job_id}` on the atrex host prints this job's whole "
                "report")
    return "the JSON report of this evaluation (`atrex pr-report --json`)"


def comment_body(result: PrResult, full_report: FullReport | None = None) -> str:
    sections = [_kept("the marker", [STICKY_MARKER]), *_summary_sections(result),
                *_detail_sections(result)]
    return fit(sections, _footer(result), COMMENT_LIMIT,
               full_report or default_full_report(result))


def full_markdown(result: PrResult) -> str:
    """The comment uncut (for `atrex job-report --markdown`; GitHub would refuse it if long)."""
    sections = [*_summary_sections(result), *_detail_sections(result)]
    return _join([s.lines() for s in sections], _footer(result))


def check_output(result: PrResult, full_report: FullReport | None = None) -> dict[str, str]:
    """The check run's output: title, summary and the details as text (each within GitHub's
    65,535 bytes)."""
    where = full_report or default_full_report(result)
    summary = fit(_summary_sections(result), _footer(result), CHECK_TEXT_LIMIT, where)
    details = _detail_sections(result)
    text = fit(details, [], CHECK_TEXT_LIMIT, where) if details else ""
    output = {"title": _clip_bytes(result.judgement.title, 255), "summary": summary}
    if text.strip():
        output["text"] = text.strip("\n")
    return output


def _clip_bytes(text: str, limit: int) -> str:
    raw = text.encode("utf-8")
    return text if len(raw) <= limit else raw[:limit - 3].decode("utf-8", "ignore") + "…"
