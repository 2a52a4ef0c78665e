"""Attempt memory: what the loop has tried, as the proposers see it, and optimization dropout.

Proposers read only the visible items: the LLM gets them in its prompt, ``autotune`` and ``kb`` skip
configurations and entries already measured. After N rounds without a gain, dropout hides a random
half of the visible items (never the baseline or the latest success), seeded, so conclusions drawn
from one noisy measurement or one stale profile can be revisited; the hidden attempt numbers go to
the log so a run can be replayed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass
class MemoryItem:
    attempt: int
    iteration: int
    proposer: str
    status: str
    accepted: bool
    reason: str
    summary: str
    incumbent_sha: str
    source_sha: str | None = None
    gain: float | None = None
    meta: dict = field(default_factory=dict)
    hidden: bool = False


@dataclass
class DropoutEvent:
    after_attempt: int
    stalled_rounds: int
    hidden_attempts: list[int]
    kept_attempts: list[int]
    seed: int

    def to_dict(self) -> dict:
        return {"after_attempt": self.after_attempt, "stalled_rounds": self.stalled_rounds,
                "hidden_attempts": self.hidden_attempts, "kept_attempts": self.kept_attempts,
                "seed": self.seed}


class AttemptMemory:
    def __init__(self) -> None:
        self.items: list[MemoryItem] = []
        self.baseline_attempt: int | None = None
        self.last_success: int | None = None

    def add(self, item: MemoryItem, baseline: bool = False) -> None:
        self.items.append(item)
        if baseline:
            self.baseline_attempt = item.attempt
        if item.accepted and not baseline:
            self.last_success = item.attempt

    def visible(self) -> list[MemoryItem]:
        return [item for item in self.items if not item.hidden]

    def tried(self, incumbent_sha: str, source_sha: str) -> MemoryItem | None:
        """A visible attempt that already measured this exact source against this incumbent."""
        for item in self.visible():
            if item.incumbent_sha == incumbent_sha and item.source_sha == source_sha:
                return item
        return None

    def dropout(self, rng: random.Random, seed: int, stalled_rounds: int) -> DropoutEvent:
        pinned = {self.baseline_attempt, self.last_success}
        eligible = [item for item in self.visible() if item.attempt not in pinned]
        count = math.ceil(len(eligible) / 2)
        hidden = sorted(rng.sample([item.attempt for item in eligible], count)) if count else []
        for item in eligible:
            if item.attempt in hidden:
                item.hidden = True
        kept = [item.attempt for item in self.visible()]
        last = self.items[-1].attempt if self.items else 0
        return DropoutEvent(after_attempt=last, stalled_rounds=stalled_rounds,
                            hidden_attempts=hidden, kept_attempts=kept, seed=seed)
