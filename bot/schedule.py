"""The `[schedule]` table of a repository's atrex.toml: opting in to scheduled optimization runs.

```toml
[schedule]
enabled = true      # required to opt in (default false)
every_hours = 24    # how often (default 24; at least 1)
max_prs = 1         # pull requests one run may open (default 1)
ops = ["rmsnorm"]   # optional allowlist of operators (default: every operator)
```

A run is *due* once per period: periods are consecutive `every_hours` windows counted from the Unix
epoch (UTC), so every process computes the same period number and the job store dedupes on
(repository, period length, period number): restarts and several schedulers never enqueue twice.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atrex.runner.errors import FormatError

DEFAULT_EVERY_HOURS = 24.0
MIN_EVERY_HOURS = 1.0


@dataclass(frozen=True)
class Schedule:
    enabled: bool = False
    every_hours: float = DEFAULT_EVERY_HOURS
    max_prs: int = 1
    ops: tuple[str, ...] | None = None  # None: every operator

    @property
    def period_s(self) -> float:
        return self.every_hours * 3600.0

    def period(self, now: float) -> int:
        """The number of the period `now` (Unix seconds) falls in."""
        return int(now // self.period_s)

    def allows(self, op: str) -> bool:
        return self.ops is None or op in self.ops


_KEYS = ("enabled", "every_hours", "max_prs", "ops")


def schedule_table(table: Any, path: str | Path = "atrex.toml") -> Schedule:
    """The validated `[schedule]` table; FormatError names the field (e.g. schedule.max_prs)."""
    if not isinstance(table, dict):
        raise FormatError(path, "schedule", "must be a table")
    for key in table:
        if key not in _KEYS:
            raise FormatError(path, f"schedule.{key}",
                              f"unknown key (expected one of {', '.join(_KEYS)})")
    return Schedule(enabled=_bool(path, table, "enabled", False),
                    every_hours=_hours(path, table),
                    max_prs=_count(path, table, "max_prs", 1),
                    ops=_ops(path, table))


def schedule_from_text(text: str | None, path: str | Path = "atrex.toml") -> Schedule:
    """The schedule of an atrex.toml given as text (None: the repository has no atrex.toml)."""
    if text is None:
        return Schedule()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FormatError(path, None, f"not valid TOML: {exc}") from None
    return schedule_table(data.get("schedule", {}), path)


def _bool(path, table: dict, key: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise FormatError(path, f"schedule.{key}", f"must be true or false, got {value!r}")
    return value


def _hours(path, table: dict) -> float:
    value = table.get("every_hours", DEFAULT_EVERY_HOURS)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FormatError(path, "schedule.every_hours", f"must be a number, got {value!r}")
    if value < MIN_EVERY_HOURS:
        raise FormatError(path, "schedule.every_hours",
                          f"must be at least {MIN_EVERY_HOURS:g}, got {value!r}")
    return float(value)


def _count(path, table: dict, key: str, default: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(path, f"schedule.{key}", f"must be an integer, got {value!r}")
    if value < 1:
        raise FormatError(path, f"schedule.{key}", f"must be at least 1, got {value!r}")
    return value


def _ops(path, table: dict) -> tuple[str, ...] | None:
    if "ops" not in table:
        return None
    value = table["ops"]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FormatError(path, "schedule.ops",
                          f"must be a list of operator names, got {value!r}")
    if not value:
        raise FormatError(path, "schedule.ops", "must name at least one operator (or be left "
                          "out for every operator)")
    return tuple(dict.fromkeys(value))
