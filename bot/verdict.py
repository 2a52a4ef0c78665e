"""Judging a pull request from the runner's two reports (head and merge base).

Per operator: the head's status, own-kernel share, roofline fraction and GPU-hour score against the
base's, and a verdict. The check run's conclusion: `failure` when an operator's head status is not
`pass` (incorrect, fallback and suspicious, and also a kernel that does not compile, crashes or
times out) or its GPU-hour score dropped by more than the repository's `regression` threshold;
`neutral` when nothing that matters for the change was measured, with the reason: no operator
changed, no shape of the changed operators runs on this machine, or nothing was timed (no GPU: the
GPU shapes and the GPU-hour score a kernel change is judged on were not measured); `success`
otherwise. A failure found on the shapes that did run is a failure whatever was not measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from atrex.runner.model import OpResult, Report, Status

SUCCESS, FAILURE, NEUTRAL = "success", "failure", "neutral"

STATUS_TEXT = {
    Status.PASS: "pass",
    Status.INCORRECT: "incorrect",
    Status.FALLBACK: "fallback",
    Status.SUSPICIOUS: "suspicious",
    Status.COMPILE_ERROR: "compile error",
    Status.RUNTIME_ERROR: "runtime error",
    Status.TIMEOUT: "timeout",
    Status.FORMAT_ERROR: "format error",
    Status.SKIPPED: "skipped",
}
STATUS_VERDICT = {
    Status.INCORRECT: "wrong results",
    Status.FALLBACK: "work done by library code, not the PR's kernels",
    Status.SUSPICIOUS: "tripped an anti-cheat check",
    Status.COMPILE_ERROR: "does not compile",
    Status.RUNTIME_ERROR: "crashes",
    Status.TIMEOUT: "timed out",
    Status.FORMAT_ERROR: "malformed operator files",
}


def weighted_fraction(op: OpResult | None) -> float | None:
    """Call-weighted mean roofline fraction over the op's timed shapes."""
    if op is None:
        return None
    pairs = [(s.weight, s.roofline_fraction) for s in op.shapes if s.roofline_fraction is not None]
    total = sum(w for w, _ in pairs)
    if not pairs or total <= 0:
        return None
    return sum(w * f for w, f in pairs) / total


@dataclass
class OpComparison:
    name: str
    head: OpResult
    base: OpResult | None
    failed: bool
    verdict: str
    regression: float | None = None  # relative drop of the score, when it dropped

    @property
    def fraction_head(self) -> float | None:
        return weighted_fraction(self.head)

    @property
    def fraction_base(self) -> float | None:
        return weighted_fraction(self.base)

    @property
    def score_delta(self) -> float | None:
        if self.base is None or self.head.score is None or self.base.score is None:
            return None
        return self.head.score - self.base.score


@dataclass(frozen=True)
class NotEvaluated:
    """A declared shape of a changed operator that this evaluation did not run, and why."""

    op: str
    shape: str
    targets: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "shape": self.shape, "targets": list(self.targets),
                "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NotEvaluated:
        return cls(data["op"], data["shape"], tuple(data["targets"]), data["reason"])


@dataclass
class Judgement:
    conclusion: str
    title: str
    ops: list[OpComparison] = field(default_factory=list)
    reason: str | None = None  # why the conclusion is neutral, in a sentence


def compare_op(head: OpResult, base: OpResult | None, threshold: float,
               timed: bool) -> OpComparison:
    if head.status is Status.SKIPPED:  # nothing was run (over the CPU memory budget): no verdict
        return OpComparison(head.name, head, base, False, "⏭️ not evaluated (skipped)")
    if head.status is not Status.PASS:
        return OpComparison(head.name, head, base, True,
                            f"❌ {STATUS_VERDICT.get(head.status, head.status.value)}")
    if base is None:
        return OpComparison(head.name, head, base, False, "✅ new operator, correct")
    if base.status not in (Status.PASS, Status.SKIPPED):
        return OpComparison(head.name, head, base, False,
                            f"✅ fixed (base: {STATUS_TEXT[base.status]})")
    if not timed or head.score is None or base.score is None:
        return OpComparison(head.name, head, base, False, "✅ correct, own kernels (not timed)")
    if base.score <= 0:
        return OpComparison(head.name, head, base, False, "✅ correct")
    change = (head.score - base.score) / base.score
    if -change > threshold:
        return OpComparison(head.name, head, base, True,
                            f"❌ regression {change:+.1%} (threshold {threshold:.0%})", -change)
    if change > threshold:
        return OpComparison(head.name, head, base, False, f"🚀 faster {change:+.1%}")
    return OpComparison(head.name, head, base, False, f"✅ unchanged ({change:+.1%})")


def judge(head: Report | None, base: Report | None, threshold: float,
          not_evaluated: list[NotEvaluated] | tuple = ()) -> Judgement:
    skipped_ops = _wholly_skipped(head, not_evaluated)
    if head is None or not head.ops:
        if skipped_ops:
            return Judgement(NEUTRAL, f"Nothing evaluated: no shape of {_names(skipped_ops)} "
                             "runs here", reason=_nothing_ran_reason(not_evaluated))
        return Judgement(NEUTRAL, "No operator changed")
    base_ops = {op.name: op for op in base.ops} if base is not None else {}
    ops = [compare_op(op, base_ops.get(op.name), threshold, head.timing_available)
           for op in head.ops]
    failed = [c for c in ops if c.failed]
    if failed:
        return Judgement(FAILURE, _failed_title(ops, failed), ops)
    if not head.timing_available:
        return Judgement(NEUTRAL, _untimed_title(ops, not_evaluated), ops,
                         reason=_untimed_reason(head, not_evaluated))
    title = _title(ops, head)
    if skipped_ops:
        title += f"; {_names(skipped_ops)} not evaluated"
    return Judgement(SUCCESS, title, ops)


def _wholly_skipped(head: Report | None, not_evaluated) -> list[str]:
    """Changed operators of which no shape ran."""
    ran = {op.name for op in head.ops} if head is not None else set()
    return list(dict.fromkeys(n.op for n in not_evaluated if n.op not in ran))


def _names(ops: list[str]) -> str:
    shown = ", ".join(ops[:3])
    return shown + (f" and {len(ops) - 3} more" if len(ops) > 3 else "")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' if count != 1 else ''}"


def _nothing_ran_reason(not_evaluated) -> str:
    reasons = sorted({n.reason for n in not_evaluated})
    return (f"none of the {_plural(len(not_evaluated), 'shape')} of the changed operators "
            f"could run here: {'; '.join(reasons)}")


def _untimed_title(ops: list[OpComparison], not_evaluated) -> str:
    shapes = sum(len(c.head.shapes) for c in ops)
    title = f"{_plural(len(ops), 'operator')} correct on {_plural(shapes, 'shape')}; not timed"
    if not_evaluated:
        title += f", {_plural(len(not_evaluated), 'shape')} not evaluated"
    return title + " (no GPU)"


def _untimed_reason(head: Report, not_evaluated) -> str:
    where = f"on {head.device.name}" if head.device.kind == "cpu" else "here"
    skipped = (f"; {_plural(len(not_evaluated), 'shape')} of the changed operators (the GPU "
               "shapes) were not evaluated at all") if not_evaluated else ""
    return (f"nothing was timed {where} (no GPU), so the GPU-hour score a kernel change is "
            f"judged on was not measured{skipped}. The shapes that ran are correct and use the "
            "PR's own kernels; a runner with a GPU decides success or failure")


def title_for(ops: list[OpComparison], head: Report) -> str:
    """The title of a failed judgement whose comparisons were changed after `judge`
    (bot.judging)."""
    failed = [c for c in ops if c.failed]
    return _failed_title(ops, failed) if failed else _title(ops, head)


def _failure_reason(c: OpComparison) -> str:
    if c.head.status is not Status.PASS:
        return STATUS_TEXT[c.head.status]
    return "regression" if c.regression is not None else "fails the base's oracle"


def _failed_title(ops: list[OpComparison], failed: list[OpComparison]) -> str:
    names = ", ".join(f"{c.name} ({_failure_reason(c)})" for c in failed[:3])
    more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"{len(failed)} of {_plural(len(ops), 'operator')} failed: {names}{more}"


def _title(ops: list[OpComparison], head: Report) -> str:
    count = _plural(len(ops), "operator")
    if head.score is None:
        return f"{count} correct, own kernels (no score)"
    return f"{count} passed; score {head.score:.3f}"
