"""Markdown for the PR thread after `/atrex optimize`: one section per operator (the follow-up PR
with its before/after table, or why none was opened), then notes. Plain data in, text out."""

from __future__ import annotations

from dataclasses import dataclass, field

from .render import code, one_line

DIFF_LIMIT_CHARS = 30000

OPENED, UPDATED, NO_GAIN, NOT_PUBLISHED, SKIPPED, ERROR = (
    "opened", "updated", "no_gain", "not_published", "skipped", "error")


@dataclass
class OpReport:
    op: str
    state: str  # one of the constants above
    text: str = ""  # why (no gain, error, skipped) or the decision reason
    stop_reason: str | None = None
    pr_number: int | None = None
    pr_url: str | None = None
    pr_title: str | None = None
    branch: str | None = None
    base: str | None = None
    table: str | None = None
    diff: str | None = None  # the winning kernel against the PR's, when no PR could be opened
    injected: bool = False  # timings came from a test harness, not a measurement
    unchanged: bool = False  # the PR's branch already had this kernel: no new commit


@dataclass
class Reply:
    header: str
    ops: list[OpReport] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def published(self) -> list[OpReport]:
        return [o for o in self.ops if o.state in (OPENED, UPDATED)]

    @property
    def failed(self) -> bool:
        return bool(self.ops) and all(o.state in (ERROR, SKIPPED) for o in self.ops) and any(
            o.state == ERROR for o in self.ops)


def render(reply: Reply) -> str:
    parts = [reply.header] + [_section(o) for o in reply.ops]
    if reply.notes:
        parts.append("**Notes**\n\n" + "\n".join(f"- {n}" for n in reply.notes))
    return "\n\n".join(p for p in parts if p)


def _section(o: OpReport) -> str:
    title = f"### {code(o.op)}: {_headline(o)}"
    lines = [title, _body(o)]
    if o.table and o.state != ERROR:
        lines.append(o.table)
    if o.injected:
        lines.append("_Timing was injected by a test harness (no GPU here): not a measurement._")
    if o.diff:
        lines.append(_diff_block(o.diff))
    return "\n\n".join(line for line in lines if line)


def _headline(o: OpReport) -> str:
    if o.state in (OPENED, UPDATED):
        return f"{o.state} #{o.pr_number}"
    return {NO_GAIN: "no pull request (no significant gain)",
            NOT_PUBLISHED: "faster kernel found, no pull request",
            SKIPPED: "not run", ERROR: "failed"}.get(o.state, o.state)


def _body(o: OpReport) -> str:
    stop = f" Stopped: {one_line(o.stop_reason)}." if o.stop_reason else ""
    if o.state in (OPENED, UPDATED):
        link = f"[{one_line(o.pr_title or f'#{o.pr_number}')}]({o.pr_url})"
        same = " The branch already had this kernel: no new commit." if o.unchanged else ""
        return (f"{link}: branch {code(o.branch or '')} into {code(o.base or '')}. "
                f"{_sentence(o.text)}{stop}{same}")
    if o.state == NO_GAIN:
        return f"{_sentence(o.text)}{stop} Nothing was pushed."
    return f"{_sentence(o.text)}{stop}"


def _sentence(text: str) -> str:
    text = one_line(text or "", 600).strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def _diff_block(diff: str) -> str:
    if len(diff) > DIFF_LIMIT_CHARS:
        diff = diff[:DIFF_LIMIT_CHARS] + f"\n... diff cut at {DIFF_LIMIT_CHARS} characters\n"
    fence = "````" if "```" in diff else "```"
    return (f"<details><summary>The verified kernel, as a diff to apply</summary>\n\n"
            f"{fence}diff\n{diff.rstrip()}\n{fence}\n\n</details>")
