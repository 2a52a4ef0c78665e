"""Finished results are never lost: `atrex check` keeps the report of every operator done so far.

After each operator the partial report is written to the `--json` file (atomically, so a reader
never sees half a file); if the run ends early (Ctrl-C, an exception, the machine's OOM killer
taking the evaluator), the file holds everything finished before that. On an exception or
interrupt the Markdown report is written too, with a note saying what was not evaluated.
Also here: the lines that tell a terminal user which operators are malformed, and the exit code.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .model import Report, Status
from .output import is_stdout, write_text

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class PartialReport:
    def __init__(self, json_path: Path | None, markdown_path: Path | None, label: str = "head"):
        self.json_path, self.markdown_path, self.label = json_path, markdown_path, label
        self.latest: Report | None = None

    def update(self, reports: dict[str, Report]) -> None:
        self.latest = reports[self.label]
        if self.json_path and not is_stdout(self.json_path):  # stdout gets one document
            write_atomic(self.json_path, self.latest.to_json() + "\n")

    def interrupted(self, exc: BaseException, planned: list[str]) -> Report | None:
        """Write what finished, with a note naming the cause and the operators not evaluated."""
        if self.latest is None:
            return None
        done = {op.name for op in self.latest.ops}
        missing = [name for name in planned if name not in done]
        cause = "interrupted (KeyboardInterrupt)" if isinstance(exc, KeyboardInterrupt) else \
            f"stopped by {type(exc).__name__}: {str(exc)[:200]}"
        self.latest.notes.append(
            f"Partial report: the run was {cause}; not evaluated: "
            f"{', '.join(missing) if missing else 'none'}.")
        if self.json_path:
            _write(self.json_path, self.latest.to_json() + "\n")
        if self.markdown_path:
            from .render import markdown

            _write(self.markdown_path, markdown(self.latest))
        return self.latest


def _write(path, text: str) -> None:
    if is_stdout(path):
        write_text(path, text)
    else:
        write_atomic(path, text)


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes it private; a report is not
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def format_error_lines(report: Report) -> list[str]:
    """One line per malformed operator: file, field and message, as `atrex: error:` lines."""
    lines = []
    for op in report.ops:
        if op.format_error is not None:
            issue = op.format_error
            where = f"{issue.file}: {issue.field}" if issue.field else issue.file
            lines.append(f"atrex: error: operator {op.name}: {where}: {issue.message}")
    return lines


def exit_code(report: Report) -> int:
    if any(op.status is Status.FORMAT_ERROR for op in report.ops):
        return EXIT_USAGE
    return EXIT_PASS if report.status is Status.PASS else EXIT_FAIL
