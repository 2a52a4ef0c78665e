"""Errors a user must fix in their repository or command line (exit code 2)."""

from __future__ import annotations


class FormatError(Exception):
    """A malformed kernel repository: says which file, which field and what is wrong."""

    def __init__(self, path: str, field: str | None, message: str):
        self.path = str(path)
        self.field = field
        self.message = message
        where = f"{self.path}: {field}" if field else self.path
        super().__init__(f"{where}: {message}")


class ResumeError(ValueError):
    """`atrex bench --resume` cannot continue the run it names (which file, which field, why)."""
