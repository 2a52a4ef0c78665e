"""Slash commands: `/atrex <command> [args]` on the first line of a new PR comment."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PREFIX = "/atrex"
_OP_NAME = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")
_SHA = re.compile(r"^[0-9a-fA-F]{7,40}$")
MAX_OPS = 32

HELP = """**atrex commands** (on the first line of a new comment):

| command | who may use it | what it does |
|---|---|---|
| `/atrex optimize [op ...]` | write permission or higher | run the optimization agent \
(default: the changed operators) |
| `/atrex rerun` | write permission or higher | evaluate the PR's head commit again |
| `/atrex approve <sha>` | write permission or higher | for exactly that commit: run a fork \
PR's code, or accept changes to what judges its kernels |
| `/atrex dashboard [rotate]` | write permission or higher | post the dashboard's links \
(`rotate`: a new secret link) |
| `/atrex help` | anyone | this message |"""


@dataclass(frozen=True)
class Command:
    name: str
    args: list[str] = field(default_factory=list)
    error: str | None = None  # set when the command is malformed; nothing runs then


def parse(body: str | None) -> Command | None:
    """The command on the comment's first line, or None when the comment is not a command."""
    first = (body or "").lstrip("\ufeff").splitlines()[0].strip() if (body or "").strip() else ""
    tokens = first.split()
    if not tokens or tokens[0].lower() != PREFIX:
        return None
    if len(tokens) == 1:
        return Command("help")
    name, args = tokens[1].lower(), tokens[2:]
    check = _CHECKS.get(name)
    if check is None:
        return Command(name, args, f"unknown command `{_clip(name)}`")
    return Command(name, args, check(args))


def _clip(text: str, limit: int = 40) -> str:
    text = text.replace("`", "'")
    return text if len(text) <= limit else text[:limit] + "…"


def _no_args(args: list[str]) -> str | None:
    return f"takes no arguments (got `{_clip(' '.join(args))}`)" if args else None


def _optimize(args: list[str]) -> str | None:
    if len(args) > MAX_OPS:
        return f"at most {MAX_OPS} operators at once"
    bad = [a for a in args if not _OP_NAME.match(a)]
    return f"`{_clip(bad[0])}` is not an operator name" if bad else None


def _approve(args: list[str]) -> str | None:
    if len(args) != 1:
        return "needs exactly one commit SHA: `/atrex approve <sha>`"
    if not _SHA.match(args[0]):
        return f"`{_clip(args[0])}` is not a commit SHA (7 to 40 hex digits)"
    return None


def _dashboard(args: list[str]) -> str | None:
    if args in ([], ["rotate"]):
        return None
    return f"takes nothing or `rotate` (got `{_clip(' '.join(args))}`)"


_CHECKS = {"optimize": _optimize, "rerun": _no_args, "approve": _approve, "help": _no_args,
           "dashboard": _dashboard}
