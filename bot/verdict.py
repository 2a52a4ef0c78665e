"""Judging a pull request from the runner's two reports (head and merge base).

Per operator: the head's status, own-kernel share, roofline fraction and GPU-hour score against the
base's, and a verdict. The check run's conclusion: `failure` when an operator's head status is not
`pass` (incorrect, fallback and suspicious, and also a kernel that does not compile, crashes or
times out) or its GPU-hour score dropped by more than the repository's `regression` threshold;
`neutral` when no operator changed; `success` otherwise. Without a GPU there is no timing, so no
score and no regression check: only correctness and fallback decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.model import OpResult, Report, Status

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


@dataclass
class Judgement:
    conclusion: str
    title: str
    ops: list[OpComparison] = field(default_factory=list)


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


def judge(head: Report | None, base: Report | None, threshold: float) -> Judgement:
    if head is None or not head.ops:
        return Judgement(NEUTRAL, "No operator changed")
    base_ops = {op.name: op for op in base.ops} if base is not None else {}
    ops = [compare_op(op, base_ops.get(op.name), threshold, head.timing_available)
           for op in head.ops]
    failed = [c for c in ops if c.failed]
    conclusion = FAILURE if failed else SUCCESS
    return Judgement(conclusion, _title(ops, failed, head), ops)


def _title(ops: list[OpComparison], failed: list[OpComparison], head: Report) -> str:
    count = f"{len(ops)} operator{'s' if len(ops) != 1 else ''}"
    if failed:
        names = ", ".join(f"{c.name} ({STATUS_TEXT[c.head.status]})" if c.head.status
                          is not Status.PASS else f"{c.name} (regression)" for c in failed[:3])
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        return f"{len(failed)} of {count} failed: {names}{more}"
    if head.score is None:
        return f"{count} correct, own kernels (no GPU timing)"
    return f"{count} passed; score {head.score:.3f}"
