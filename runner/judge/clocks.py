"""The card's clocks while a shape is timed.

nvidia-smi samples the card in its own process beside the timed batches, so a report says what
SM clock its times ran at and whether the driver held the clock down (a power cap, a thermal or a
hardware slowdown). One kernel's bench time differed by 2.5% on one H200 25 minutes apart and by
4% between H100 machines (benchmarks/results/README.md, stops 37 and 38): the clock is the first
thing to look at when two runs disagree. Without nvidia-smi, or without samples, there is no
summary; nothing is guessed.
"""

from __future__ import annotations

import shutil
import signal
import statistics
import subprocess
import tempfile
from dataclasses import dataclass

INTERVAL_MS = 100
FIELDS = ("clocks.sm", "power.draw", "temperature.gpu",
          "clocks_event_reasons.sw_power_cap", "clocks_event_reasons.hw_slowdown",
          "clocks_event_reasons.sw_thermal_slowdown",
          "clocks_event_reasons.hw_thermal_slowdown",
          "clocks_event_reasons.hw_power_brake_slowdown")
SLOWDOWNS = ("power cap", "hardware slowdown", "thermal slowdown (software)",
             "thermal slowdown (hardware)", "power brake")  # FIELDS[3:], in order
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ClockSummary:
    samples: int
    sm_clock_median_mhz: float
    sm_clock_min_mhz: int
    sm_clock_max_mhz: int
    power_max_w: float | None
    temperature_max_c: int | None
    slowdowns: tuple[str, ...]  # the reasons nvidia-smi gave as active in any sample


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_samples(text: str) -> ClockSummary | None:
    """nvidia-smi's csv lines (noheader, nounits) of FIELDS; lines that are not a sample (an
    error message, a line cut short when the sampler stopped) are skipped."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == len(FIELDS) and _number(cells[0]) is not None:
            rows.append(cells)
    if not rows:
        return None
    sm = [int(_number(row[0])) for row in rows]
    power = [v for row in rows if (v := _number(row[1])) is not None]
    temperature = [v for row in rows if (v := _number(row[2])) is not None]
    slowdowns = tuple(name for i, name in enumerate(SLOWDOWNS)
                      if any(row[3 + i] == "Active" for row in rows))
    return ClockSummary(samples=len(rows), sm_clock_median_mhz=float(statistics.median(sm)),
                        sm_clock_min_mhz=min(sm), sm_clock_max_mhz=max(sm),
                        power_max_w=max(power) if power else None,
                        temperature_max_c=int(max(temperature)) if temperature else None,
                        slowdowns=slowdowns)


class ClockSampler:
    """`with ClockSampler(card) as clocks: ...`, then `clocks.summary` (None without nvidia-smi,
    without a card, or without a sample). `card` is nvidia-smi's --id: a UUID or an index."""

    def __init__(self, card: str | None, interval_ms: int = INTERVAL_MS,
                 command: str = "nvidia-smi", stop_timeout_s: float = STOP_TIMEOUT_S):
        self.card = card
        self.interval_ms = interval_ms
        self.command = command
        self.stop_timeout_s = stop_timeout_s
        self.summary: ClockSummary | None = None
        self._proc: subprocess.Popen | None = None
        self._out = None  # a file, not a pipe: a long timing cannot fill it and stall the sampler

    def _argv(self) -> list[str]:
        argv = [self.command, f"--id={self.card}", f"--query-gpu={','.join(FIELDS)}",
                "--format=csv,noheader,nounits", f"-lms={self.interval_ms}"]
        # its output to a file is block-buffered: line-buffered, nothing waits in it at the stop
        stdbuf = shutil.which("stdbuf")
        return [stdbuf, "-oL", *argv] if stdbuf else argv

    def __enter__(self) -> ClockSampler:
        if self.card is not None and shutil.which(self.command):
            self._out = tempfile.TemporaryFile("w+")
            try:
                self._proc = subprocess.Popen(self._argv(), stdout=self._out,
                                              stderr=subprocess.DEVNULL, text=True)
            except OSError:
                self._proc = None
        return self

    def __exit__(self, *exc) -> bool:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)  # how nvidia-smi's loop is meant to be ended
            try:
                self._proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._out is not None:
            self._out.seek(0)
            self.summary = parse_samples(self._out.read())
            self._out.close()
        return False
