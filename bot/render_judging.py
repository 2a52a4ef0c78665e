"""Markdown for the list a PR comment opens with when the PR changes what judges its kernels.

Pure functions of a `atrex.bot.judging.JudgingReport`. Names and values come from the repository
(untrusted), so they are shown as inline code that cannot break out of a list item or mention
anyone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .judging import CONFIG_SCOPE, JudgingChange, JudgingReport, Kind, base_oracle_status

if TYPE_CHECKING:
    from .render import Section

_KIND_TEXT = {
    Kind.ORACLE: "changed",
    Kind.LOOSER: "looser",
    Kind.TIGHTER: "stricter",
    Kind.SHAPE_ADDED: "added",
    Kind.SHAPE_DROPPED: "dropped",
    Kind.SHAPE_CHANGED: "changed (the old shape is no longer measured)",
    Kind.REWEIGHTED: "re-weighted",
    Kind.OP_REMOVED: "removed (its shapes are no longer measured)",
    Kind.INTERFACE: "changed: the base's oracle cannot judge the head kernel",
}


def _code(text: str) -> str:
    return "`" + text.replace("`", "'").replace("\n", " ").replace("|", "¦") + "`"


def _values(change: JudgingChange) -> str:
    if change.kind is Kind.ORACLE:
        if change.old is None:
            return "added"
        return "deleted" if change.new is None else "changed"
    if change.old is not None and change.new is not None:
        return f"{_code(change.old)} -> {_code(change.new)}"
    if change.old is not None:
        return f"was {_code(change.old)}"
    return f"now {_code(change.new)}" if change.new is not None else ""


def change_line(change: JudgingChange) -> str:
    flag = " ⚠️" if change.kind.needs_approval else ""
    values = _values(change)
    kind = _KIND_TEXT[change.kind] if change.kind is not Kind.ORACLE else ""
    detail = "; ".join(part for part in (values, kind) if part)
    return f"- {_code(change.scope)} {_code(change.what)}: {detail}{flag}"


def _oracle_lines(report: JudgingReport) -> list[str]:
    if report.base_rules is None or not report.base_rules.ops:
        return []
    verdicts = []
    for comparison in report.base_rules.ops:
        status = base_oracle_status(report, comparison.name) or "not run"
        icon = "✅" if status == "pass" else "❌"
        verdicts.append(f"{_code(comparison.name)} {icon} {status}")
    return ["", "The head kernel was also judged by the merge base's oracle (reference, inputs, "
            "shapes, weights) and rules (tolerances, thresholds); the stricter verdict decides: "
            + ", ".join(verdicts) + ".", *_failed_shapes(report)]


def _failed_shapes(report: JudgingReport, limit: int = 5) -> list[str]:
    """What the base's oracle found wrong, shape by shape (messages come from the judge, but
    quote candidate output: shown as one harmless line)."""
    from .render import one_line  # render imports this module

    if report.head_report is None:
        return []
    items = [f"- {_code(op.name)} shape {_code(shape.id)}: "
             f"{shape.status.value}{': ' + one_line(shape.message) if shape.message else ''}"
             for op in report.head_report.ops for shape in op.shapes
             if shape.status.value != "pass"]
    more = [f"- … {len(items) - limit} more"] if len(items) > limit else []
    return ["", *items[:limit], *more] if items else []


def _approval_lines(report: JudgingReport, head_sha: str) -> list[str]:
    if not report.needs_approval:
        return []
    if report.approved_by:
        return ["", f"✅ Approved for `{head_sha[:12]}` by @{report.approved_by}."]
    why = ("**Needs a maintainer's approval** (⚠️ above): a looser tolerance or threshold, a "
           "dropped or changed shape, re-weighting, a removed operator or an interface the "
           "base's oracle cannot judge can raise a grade without a better kernel.")
    if not report.approvable:
        return ["", why + " The GitHub Action cannot record an approval: this check fails "
                "(`action_required`) until a maintainer reviews these changes and merges "
                "over it."]
    return ["", why + f" A maintainer (write permission) approves this commit with "
            f"`/atrex approve {head_sha}`; until then the check run's conclusion is "
            "`action_required`."]


def judging_section(report: JudgingReport | None, head_sha: str) -> Section:
    """The list (empty when nothing that judges a kernel changed), as the section of the comment
    given room first: when a limit forces it, changes are left out from the end, never the
    verdict of the base's oracle or how to approve."""
    from .render import Section  # render imports this module

    name = "the changes to what judges the kernels"
    if report is None or (not report.changes and not report.notes):
        return Section(name, [])
    head: list[str] = [""]
    rows: list[str] = []
    if report.changes:
        scopes = sorted({c.scope for c in report.changes}, key=lambda s: (s != CONFIG_SCOPE, s))
        ordered = [c for scope in scopes for c in report.changes if c.scope == scope]
        head += ["### This pull request changes what judges its kernels", ""]
        rows = [change_line(c) for c in ordered]
    tail = _oracle_lines(report)
    if report.notes:
        tail += ["", *[f"> {note}" for note in report.notes]]
    return Section(name, head, rows, tail + _approval_lines(report, head_sha), priority=0,
                   unit="changes")
