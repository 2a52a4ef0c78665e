"""Attempt records and the ``attempts.jsonl`` log: one JSON object per attempt, written as it
happens (iteration 0 is the baseline and carries the run's configuration and seed)."""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

DIFF_LIMIT_CHARS = 20000


@dataclass
class Attempt:
    iteration: int
    attempt: int
    proposer: str
    status: str  # a runner status, or malformed / proposer_error / duplicate, or baseline's
    accepted: bool
    reason: str
    summary: str
    roofline_fraction: float | None = None  # E_op of the traced shape mix
    own_kernel_share: float | None = None
    time_ms: float | None = None  # trace-weighted time
    incumbent_time_ms: float | None = None  # the incumbent's, same worker, interleaved
    gain: float | None = None
    timing_source: str | None = None
    bottleneck: str | None = None
    kb_entries: list[str] = field(default_factory=list)
    tokens: int = 0
    gpu_seconds: float | None = None  # the evaluation this attempt was part of
    candidate_sha: str | None = None
    incumbent_sha: str | None = None
    message: str | None = None
    shapes: list[dict] = field(default_factory=list)
    diff: str = ""
    dropout: dict | None = None
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def unified_diff(before: str, after: str, name: str = "kernel.py") -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{name}", tofile=f"b/{name}")
    text = "".join(lines)
    if len(text) > DIFF_LIMIT_CHARS:
        text = text[:DIFF_LIMIT_CHARS] + f"\n... diff truncated at {DIFF_LIMIT_CHARS} chars\n"
    return text


class AttemptLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self.attempts: list[Attempt] = []

    def write(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)
        with self.path.open("a") as handle:
            handle.write(json.dumps(attempt.to_dict(), default=str) + "\n")

    def rewrite(self) -> None:
        """Rewrite the file after an attempt was amended (e.g. a dropout attached to it)."""
        with self.path.open("w") as handle:
            for attempt in self.attempts:
                handle.write(json.dumps(attempt.to_dict(), default=str) + "\n")


def read_attempts(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
