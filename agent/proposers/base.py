"""What a proposer sees and what it returns.

A proposer turns the loop's context (the incumbent, its profile, the visible attempt memory, the
retrieved knowledge) into proposals: usually one complete candidate module; ``autotune`` may return
a small batch of constant settings that are verified and timed together by one runner judge.
Returning None means "nothing left to propose right now". A proposal that failed before
verification (a malformed LLM reply, an API error) carries ``failure_status`` and no source; it is
recorded as a failed attempt, never raised.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

from atrex.runner.repo import OpSpec

from ..kb import Retrieval
from ..measure import Measurement
from ..memory import MemoryItem
from ..profiling import Profile


@dataclass
class ProposalContext:
    op: OpSpec
    family: str | None
    dtype: str | None
    gpu: str | None
    reference_source: str
    incumbent_source: str
    incumbent_sha: str
    incumbent: Measurement | None
    profile: Profile
    memory: list[MemoryItem]  # visible items only
    kb_notes: list[Retrieval]
    kb_kernels: list[Retrieval]
    iteration: int
    rng: random.Random
    target_fraction: float


@dataclass
class Proposal:
    proposer: str
    summary: str
    source: str | None = None
    failure_status: str | None = None  # "malformed" or "proposer_error"
    failure_reason: str | None = None
    tokens: int = 0
    meta: dict = field(default_factory=dict)


class Proposer(Protocol):
    name: str

    def propose(self, ctx: ProposalContext) -> list[Proposal] | None: ...
