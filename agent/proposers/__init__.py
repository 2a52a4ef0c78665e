"""Proposers: ``llm``, ``autotune`` and ``kb`` (see base.py for the contract)."""

from __future__ import annotations

from .autotune import AutotuneProposer
from .base import Proposal, ProposalContext, Proposer
from .kb import KbProposer
from .llm import LlmProposer, LlmSettings, TokenBudget

KNOWN = ("llm", "autotune", "kb")

__all__ = ["KNOWN", "AutotuneProposer", "KbProposer", "LlmProposer", "LlmSettings", "Proposal",
           "ProposalContext", "Proposer", "TokenBudget", "parse_proposers"]


def parse_proposers(values: list[str] | str | None, llm_configured: bool) -> list[str]:
    """Names from repeated and/or comma-separated values; default autotune then kb (llm first
    when an endpoint is configured). Raises ValueError for unknown or duplicate names."""
    if isinstance(values, str):
        values = [values]
    names = [n.strip() for v in (values or []) for n in v.split(",") if n.strip()]
    if not names:
        return ["llm", "autotune", "kb"] if llm_configured else ["autotune", "kb"]
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ValueError(f"unknown proposer {unknown[0]!r} (choose from {', '.join(KNOWN)})")
    if len(set(names)) != len(names):
        raise ValueError("a proposer is listed twice")
    return names
