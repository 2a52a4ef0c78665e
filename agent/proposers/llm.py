"""``llm``: ask any OpenAI-compatible endpoint for one improved module (through the ``openai``
client, imported only when this proposer is used).

Token budget: every reply's ``usage.total_tokens`` is charged (estimated from the text when the
server reports no usage); once the budget is spent the proposer has nothing more to propose. API
errors and malformed replies become failed attempts, never exceptions out of the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .base import Proposal, ProposalContext
from .extract import extract_module
from .prompt import build_messages


@dataclass(frozen=True)
class LlmSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = None
    reply_max_tokens: int = 8192
    temperature: float = 0.2
    timeout_s: float = 300.0
    max_retries: int = 2


@dataclass
class TokenBudget:
    limit: int | None
    used: int = 0

    @property
    def left(self) -> int | None:
        return None if self.limit is None else max(0, self.limit - self.used)

    def charge(self, tokens: int) -> None:
        self.used += max(0, int(tokens))


def _openai_client(settings: LlmSettings):
    import openai  # noqa: PLC0415 - optional dependency, only for the llm proposer

    return openai.OpenAI(base_url=settings.base_url, api_key=settings.api_key or "not-set",
                         timeout=settings.timeout_s, max_retries=settings.max_retries)


class LlmProposer:
    name = "llm"

    def __init__(self, settings: LlmSettings, tokens: TokenBudget,
                 client_factory: Callable[[LlmSettings], object] = _openai_client):
        self.settings, self.tokens = settings, tokens
        self._factory = client_factory
        self._client = None

    def propose(self, ctx: ProposalContext) -> list[Proposal] | None:
        left = self.tokens.left
        if left is not None and left <= 0:
            return None
        try:
            reply, tokens = self._ask(build_messages(ctx), left)
        except Exception as exc:  # noqa: BLE001 - any API/transport failure is a failed attempt
            return [Proposal(self.name, "the LLM request failed", failure_status="proposer_error",
                             failure_reason=f"{type(exc).__name__}: {str(exc)[:300]}")]
        self.tokens.charge(tokens)
        extraction = extract_module(reply)
        summary = extraction.summary or "(no explanation)"
        if extraction.source is None:
            return [Proposal(self.name, summary, failure_status="malformed",
                             failure_reason=f"malformed reply: {extraction.problem}",
                             tokens=tokens)]
        return [Proposal(self.name, summary, source=extraction.source, tokens=tokens,
                         meta={"model": self.settings.model})]

    def _ask(self, messages: list[dict], left: int | None) -> tuple[str, int]:
        if self._client is None:
            self._client = self._factory(self.settings)
        limit = self.settings.reply_max_tokens if left is None else min(
            self.settings.reply_max_tokens, left)
        response = self._client.chat.completions.create(
            model=self.settings.model, messages=messages, max_tokens=limit,
            temperature=self.settings.temperature)
        text = (response.choices[0].message.content or "") if response.choices else ""
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "total_tokens", None) if usage is not None else None
        if tokens is None:
            tokens = (sum(len(m["content"]) for m in messages) + len(text)) // 4
        return text, int(tokens)
