"""Routing webhook deliveries to small handlers, one module per event family.

A handler is `handler(event, ctx) -> Intake`: it reads the (signature-checked) payload and says
which jobs to record; it makes no network calls, so the web process answers within milliseconds.
Changes to the bot's own tables (installed repositories) are returned as data in
`Intake.repo_changes` and recorded in the delivery's transaction, only for a delivery not seen
before. Every value that is stored is validated here first (ids fit a 64-bit integer column,
SHAs are SHAs, names have GitHub's shape and length): a payload that does not is answered 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .config import BotConfig
from .store import NewJob, RepoChange, SqlStore

MAX_ID = 2**63 - 1  # SQLite INTEGER, PostgreSQL BIGINT: a larger id overflows the column
_SHA = re.compile(r"[0-9a-f]{40}")
# owner (39: GitHub's login limit) / repository name (100); ASCII only
_REPO = re.compile(r"[A-Za-z0-9_.-]{1,39}/[A-Za-z0-9_.-]{1,100}", re.ASCII)
_LOGIN = re.compile(r"[A-Za-z0-9_.-]{1,39}(\[bot\])?|[A-Za-z0-9_.-]{1,100}\[bot\]", re.ASCII)


class Malformed(Exception):
    """The payload lacks a field the handler needs, or has it with the wrong type or shape
    (HTTP 400)."""


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

    def id(self, *path: str | int, optional: bool = False) -> int | None:
        """A GitHub id or number: a positive integer that fits a 64-bit column."""
        value = self.get(*path, kind=int, optional=optional)
        if value is not None and not 1 <= value <= MAX_ID:
            raise Malformed(f"{_dotted(path)} is not an id (1 to {MAX_ID})")
        return value

    def sha(self, *path: str | int) -> str:
        value = self.get(*path, kind=str)
        if not _SHA.fullmatch(value):
            raise Malformed(f"{_dotted(path)} is not a commit SHA (40 lowercase hex digits)")
        return value

    def repo(self, *path: str | int, optional: bool = False) -> str | None:
        """A repository's full name, owner/name."""
        value = self.get(*path, kind=str, optional=optional)
        if value is not None and not _REPO.fullmatch(value):
            raise Malformed(f"{_dotted(path)} is not a repository full name (owner/name)")
        return value

    def login(self, *path: str | int, optional: bool = False) -> str | None:
        value = self.get(*path, kind=str, optional=optional)
        if value is not None and not _LOGIN.fullmatch(value):
            raise Malformed(f"{_dotted(path)} is not a GitHub login")
        return value


def _dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(map(str, path))


@dataclass(frozen=True)
class IntakeContext:
    config: BotConfig
    store: SqlStore


@dataclass
class Intake:
    jobs: list[NewJob] = field(default_factory=list)
    repo_changes: list[RepoChange] = field(default_factory=list)
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
