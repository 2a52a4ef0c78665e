"""Where a command's documents go: a file, or standard output when the path is `-`.

When a document goes to standard output, the human text (table, reasons, verdict) goes to
standard error instead, so `atrex check --json - | jq` reads clean JSON.
"""

from __future__ import annotations

import sys
from pathlib import Path

STDOUT = "-"


def is_stdout(path: str | Path | None) -> bool:
    return path is not None and str(path) == STDOUT


def stdout_conflict(paths: dict[str, str | Path | None]) -> str | None:
    """An error message when more than one option writes to standard output, else None."""
    named = [option for option, path in paths.items() if is_stdout(path)]
    if len(named) > 1:
        return f"{' and '.join(named)}: only one output can go to standard output (-)"
    return None


def human_stream(paths: dict[str, str | Path | None]):
    """The stream for the table, reasons and verdict: stderr when a document takes stdout."""
    return sys.stderr if any(is_stdout(p) for p in paths.values()) else sys.stdout


def write_text(path: str | Path, text: str) -> None:
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    if is_stdout(path):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
