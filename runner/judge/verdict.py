"""A shape's verdict for one contestant, and the failure a judging stage raises."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Finding, FindingKind, Status


class StageFailure(Exception):
    def __init__(self, status: Status, kind: FindingKind, message: str,
                 own_share: float | None = None, file: str | None = None,
                 line: int | None = None):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message
        self.own_share, self.file, self.line = own_share, file, line


@dataclass
class Verdict:
    status: Status
    findings: list[Finding] = field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    own_share: float | None = None
    rel_l2_error: float | None = None
    reference_max_abs_error: float | None = None  # the native-dtype reference vs the oracle
    reference_rel_l2_error: float | None = None
    message: str | None = None
    implementation: str | None = None  # a baseline's own account of what it ran

    @classmethod
    def failed(cls, failure: StageFailure) -> Verdict:
        return cls(failure.status, message=failure.message, own_share=failure.own_share,
                   findings=[Finding(failure.kind, failure.message, failure.file, failure.line)])

    def payload(self) -> dict:
        """As the judge sends it to the evaluator."""
        return {"status": self.status.value, "max_abs_error": self.max_abs_error,
                "max_rel_error": self.max_rel_error, "own_share": self.own_share,
                "rel_l2_error": self.rel_l2_error,
                "reference_max_abs_error": self.reference_max_abs_error,
                "reference_rel_l2_error": self.reference_rel_l2_error,
                "message": self.message, "implementation": self.implementation,
                "findings": [{"kind": f.kind.value, "message": f.message, "file": f.file,
                              "line": f.line} for f in self.findings]}
