"""Progress display: one line per attempt plus the incumbent's numbers (rich when installed, plain
text otherwise, e.g. on a bare GPU image)."""

from __future__ import annotations

import sys
from typing import Protocol

from .measure import Measurement
from .profiling import Profile
from .records import Attempt


class Display(Protocol):
    def progress(self, op: str, shape: str, label: str | None) -> None: ...
    def baseline(self, attempt: Attempt, m: Measurement, profile: Profile) -> None: ...
    def attempt(self, attempt: Attempt, incumbent: Measurement) -> None: ...
    def note(self, text: str) -> None: ...
    def finish(self, result) -> None: ...


class NullDisplay:
    progress = None

    def baseline(self, attempt, m, profile) -> None:
        pass

    def attempt(self, attempt, incumbent) -> None:
        pass

    def note(self, text) -> None:
        pass

    def finish(self, result) -> None:
        pass


def _num(value, fmt: str = "{:.3f}") -> str:
    return "-" if value is None else fmt.format(value)


def incumbent_line(m: Measurement) -> str:
    return (f"incumbent: {m.status}, roofline {_num(m.roofline_fraction)}, own share "
            f"{_num(m.own_kernel_share, '{:.2f}')}, time {_num(m.weighted_time_ms, '{:.4g} ms')}")


def attempt_line(a: Attempt) -> str:
    verdict = "ACCEPTED" if a.accepted else a.status
    gain = "" if a.gain is None else f" gain {a.gain:+.1%}"
    return (f"[{a.iteration}.{a.attempt}] {a.proposer:<8} {verdict:<14} roofline "
            f"{_num(a.roofline_fraction)}{gain} | {a.summary[:70]} | {a.reason[:110]}")


class TextDisplay:
    """Plain lines on stderr; also the base for the rich display's wording."""

    progress = None

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr

    def _print(self, text: str, style: str | None = None) -> None:
        print(text, file=self.stream, flush=True)

    def baseline(self, attempt: Attempt, m: Measurement, profile: Profile) -> None:
        self._print(f"baseline: {m.status}; bottleneck {profile.bottleneck} ({profile.source}: "
                    f"{profile.evidence})")
        self._print(incumbent_line(m), "bold")

    def attempt(self, attempt: Attempt, incumbent: Measurement) -> None:
        self._print(attempt_line(attempt), "green" if attempt.accepted else None)
        if attempt.accepted:
            self._print(incumbent_line(incumbent), "bold")

    def note(self, text: str) -> None:
        self._print(f"note: {text}", "yellow")

    def finish(self, result) -> None:
        verdict = "improved" if result.improved else "unchanged"
        self._print(f"done ({result.stop_reason}): {verdict}; {result.final_decision.reason}",
                    "bold")
        self._print(f"before: {incumbent_line(result.before)[11:]}")
        self._print(f"after:  {incumbent_line(result.after)[11:]}")
        self._print(f"outputs in {result.out_dir}")


class RichDisplay(TextDisplay):
    def __init__(self):
        from rich.console import Console

        super().__init__()
        self.console = Console(stderr=True, highlight=False)

    def _print(self, text: str, style: str | None = None) -> None:
        self.console.print(text, style=style, markup=False, soft_wrap=True)


def make_display(quiet: bool = False) -> Display:
    if quiet:
        return NullDisplay()
    try:
        return RichDisplay()
    except ImportError:
        return TextDisplay()
