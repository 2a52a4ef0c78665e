"""What `atrex check` and `atrex bench` print: progress, the reason of every non-pass, the verdict.

Progress goes to standard error: a live bar on a terminal, and where standard error is not a
terminal (a CI log, a file) one line per operator and shape, so a long run shows where it is.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .model import STATUS_SEVERITY, FindingKind, OpResult, Report, ShapeResult, Status

# static hints never decide a status; they only point at a line when nothing better does
HINT_KINDS = frozenset({FindingKind.TORCH_COMPUTE_CALL, FindingKind.TORCH_COMPILE,
                        FindingKind.REFERENCE_IMPORT, FindingKind.LIBRARY_IMPORT})

ProgressFn = Callable[[str, str | None, str | None], None]


@dataclass(frozen=True)
class Reason:
    """Why one operator's shapes are not `pass` (shapes with the same reason grouped)."""

    op: str
    shapes: tuple[str, ...]
    status: Status
    text: str  # the first line of the deciding finding, else of the shape's message
    where: str | None = None  # file:line of the deciding finding, or of a static hint
    label: str | None = None  # the contestant, when several were judged (bench)

    def line(self) -> str:
        who = f"{self.label}: " if self.label else ""
        shapes = f" / {', '.join(self.shapes)}" if self.shapes else ""
        where = f" [{self.where}]" if self.where else ""
        return f"{who}{self.op}{shapes}: {self.status.value}: {self.text}{where}"


def reasons(report: Report, label: str | None = None) -> list[Reason]:
    found: list[Reason] = []
    for op in report.ops:
        if op.format_error is not None:
            issue = op.format_error
            where = f"{issue.file}: {issue.field}" if issue.field else issue.file
            found.append(Reason(op.name, (), Status.FORMAT_ERROR, first_line(issue.message),
                                where, label))
        groups: dict[tuple[Status, str, str | None], list[str]] = {}
        for shape in op.shapes:
            if shape.status is Status.PASS:
                continue
            text, where = reason_of(op, shape)
            groups.setdefault((shape.status, text, where), []).append(shape.id)
        found += [Reason(op.name, tuple(ids), status, text, where, label)
                  for (status, text, where), ids in groups.items()]
    return found


def reason_of(op: OpResult, shape: ShapeResult) -> tuple[str, str | None]:
    mine = [f for f in op.findings if f.shape_id in (shape.id, None)]
    deciding = [f for f in mine if f.kind not in HINT_KINDS]
    text = first_line(deciding[0].message) if deciding else ""
    if shape.message and (not text or not deciding[0].file):
        text = first_line(shape.message)
    located = next((f for f in deciding if f.file), None)
    if located is not None:
        return text or "no reason recorded", _location(located.file, located.line)
    hint = next((f for f in mine if f.kind in HINT_KINDS and f.file), None)
    if hint is not None and shape.status in (Status.FALLBACK, Status.SUSPICIOUS):
        return (text or "no reason recorded",
                f"hint {hint.kind.value} at {_location(hint.file, hint.line)}")
    return text or "no reason recorded", None


def _location(file: str, line: int | None) -> str:
    return f"{file}:{line}" if line else file


def first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


def verdict_line(report: Report, command: str = "check") -> str:
    """One line: the status, how many operators pass, and the score (or why there is none)."""
    ops = report.ops
    passed = sum(op.status is Status.PASS for op in ops)
    counts = {s: sum(op.status is s for op in ops) for s in (*STATUS_SEVERITY, Status.SKIPPED)
              if s is not Status.PASS}  # most severe first
    failing = "".join(f", {n} {status.value}" for status, n in counts.items() if n)
    if not report.timing_available:
        score = "score n/a (no GPU: correctness and fallback only)"
    elif report.score is None:
        score = "score n/a (no roofline)"
    else:
        peaks = report.device.peaks.source if report.device.peaks else "no"
        score = f"score {report.score:.3f} ({peaks} peaks)"
    return (f"atrex {command}: {report.status.value}: {passed}/{len(ops)} operators pass"
            f"{failing}; {score}")


def print_reasons(console, found: list[Reason]) -> None:
    if not found:
        return
    console.print("[b]why not pass:[/b]")
    for reason in found:
        console.print(f"  {reason.line()}", markup=False, highlight=False, soft_wrap=True)


# --- progress ----------------------------------------------------------------------------------

class ProgressLines:
    """One line per operator and shape (the first time the run reaches it), with elapsed time."""

    def __init__(self, total: int, stream=None, prefix: str = "atrex"):
        self.total = total
        self.stream = stream or sys.stderr
        self.prefix = prefix
        self.seen: set[tuple[str, str]] = set()
        self.loading: set[str] = set()
        self.start = time.monotonic()

    def __call__(self, op: str, shape: str | None, label: str | None) -> None:
        if shape is None:
            if op not in self.loading:
                self.loading.add(op)
                self._emit(f"{op}: loading")
            return
        if (op, shape) in self.seen:
            return
        self.seen.add((op, shape))
        width = len(str(self.total))
        self._emit(f"[{len(self.seen):>{width}}/{self.total}] {op} / {shape}")

    def _emit(self, text: str) -> None:
        elapsed = time.monotonic() - self.start
        print(f"{self.prefix}: {text} ({elapsed:.0f} s)", file=self.stream, flush=True)


@contextmanager
def progress(total: int, quiet: bool = False, stream=None,
             prefix: str = "atrex") -> Iterator[ProgressFn | None]:
    """A progress callback for `evaluate`: none when quiet, a live bar on a terminal, else
    lines."""
    stream = stream or sys.stderr
    if quiet:
        yield None
    elif stream.isatty():
        with _live_bar(total, stream) as callback:
            yield callback
    else:
        yield ProgressLines(total, stream, prefix)


@contextmanager
def _live_bar(total: int, stream) -> Iterator[ProgressFn]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.completed}/{task.total} shapes"), TimeElapsedColumn())
    with Progress(*columns, console=Console(file=stream), transient=True) as bar:
        task = bar.add_task("evaluating", total=total)
        seen: set[tuple[str, str]] = set()

        def on_progress(op: str, shape: str | None, label: str | None) -> None:
            if shape is None:
                bar.update(task, description=f"{op}: loading")
                return
            if (op, shape) not in seen:
                if seen:
                    bar.advance(task)
                seen.add((op, shape))
            bar.update(task, description=f"{op} / {shape}")

        yield on_progress
        bar.update(task, completed=total)
