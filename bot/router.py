"""Routing webhook deliveries to small handlers, one module per event family.

A handler is `handler(event, ctx) -> Intake`: it reads the (signature-checked) payload and says
which jobs to record; it makes no network calls, so the web process answers within milliseconds.
Side effects on the bot's own tables (installed repositories) are returned as callables in
`Intake.after` and applied only for a delivery not seen before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .config import BotConfig
from .store import NewJob, SqlStore


class Malformed(Exception):
    """The payload lacks a field the handler needs, or has it with the wrong type (HTTP 400)."""


@dataclass(frozen=True)
class WebhookEvent:
    name: str
    action: str | None
    payload: dict[str, Any]
    delivery_id: str

    def get(self, *path: str | int, kind: type | tuple[type, ...] = object,
            optional: bool = False) -> Any:
        value: Any = self.payload
        for key in path:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                if optional:
                    return None
                raise Malformed(f"missing {'.'.join(map(str, path))}") from None
        if optional and value is None:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise Malformed(f"{'.'.join(map(str, path))} has the wrong type")
        return value


@dataclass(frozen=True)
class IntakeContext:
    config: BotConfig
    store: SqlStore


@dataclass
class Intake:
    jobs: list[NewJob] = field(default_factory=list)
    after: list[Callable[[SqlStore], None]] = field(default_factory=list)
    note: str | None = None  # why nothing was recorded, for the response body and logs


Handler = Callable[[WebhookEvent, IntakeContext], Intake]


class Router:
    def __init__(self) -> None:
        self._routes: dict[tuple[str, str | None], Handler] = {}

    def add(self, event: str, actions: tuple[str, ...] | None, handler: Handler) -> None:
        for action in actions or (None,):
            key = (event, action)
            if key in self._routes:
                raise ValueError(f"two handlers for {event}.{action}")
            self._routes[key] = handler

    def lookup(self, event: str, action: str | None) -> Handler | None:
        return self._routes.get((event, action)) or self._routes.get((event, None))

    def routes(self) -> list[tuple[str, str | None]]:
        return sorted(self._routes, key=lambda k: (k[0], k[1] or ""))
