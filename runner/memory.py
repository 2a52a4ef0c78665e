"""Memory on a CPU machine: the budget a run may use, and telling an out-of-memory kill apart.

A CPU run keeps every tensor in host memory, and a reference computed in float64 on upcast inputs
needs several times the inputs' size: on a 24 GB machine the 30 Atrex-Bench operators at their
smallest shapes reached 20.7 GB of RSS, and one reference was killed by the kernel. So a CPU run
skips a shape whose estimate exceeds a budget (runner/judge/survey.py estimates), and a process
that dies with SIGKILL after using most of the memory it had is reported as an out-of-memory kill,
not as an anonymous death.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

GIB = 1024 ** 3
# Half the machine for the budget: the judge, its executors and the evaluator share it, and the
# estimate counts the reference's tensors, not the allocator's slack or the interpreter's own.
DEFAULT_BUDGET_FRACTION = 0.5
# A SIGKILL after the process reached this share of the memory limit is taken as the OOM killer.
OOM_SHARE = 0.5


def memory_limit_bytes() -> int | None:
    """The memory this process tree may use: its cgroup's limit, else the machine's RAM."""
    for limit in (_cgroup_limit(), _meminfo_total()):
        if limit:
            return limit
    return None


def default_budget_bytes() -> int | None:
    limit = memory_limit_bytes()
    return int(limit * DEFAULT_BUDGET_FRACTION) if limit else None


def _cgroup_limit() -> int | None:
    for path in (_cgroup_dir() / "memory.max", Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        with contextlib.suppress(OSError, ValueError):
            text = path.read_text().strip()
            if text != "max" and int(text) < (1 << 60):  # v1 writes a huge number for "none"
                return int(text)
    return None


def _cgroup_dir() -> Path:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return Path("/sys/fs/cgroup") / line[3:].lstrip("/")
    return Path("/sys/fs/cgroup")


def _meminfo_total() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return None


def oom_kills() -> int | None:
    """The cgroup's count of OOM kills (cgroup v2), to compare before and after a run."""
    with contextlib.suppress(OSError, ValueError):
        for line in (_cgroup_dir() / "memory.events").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    return None


@dataclass(frozen=True)
class Exit:
    """How a child process ended: its return code (negative: the signal) and peak RSS."""

    code: int
    peak_rss_bytes: int | None = None


def wait_exit(proc: subprocess.Popen) -> Exit:
    """Reap a child with its resource usage (Popen.wait drops the peak RSS the kernel reports)."""
    if proc.returncode is not None:
        return Exit(proc.returncode, getattr(proc, "atrex_peak_rss", None))
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:  # reaped elsewhere (a zygote's child): what its reaper reported
        code = proc.wait()
        return Exit(code, getattr(proc, "atrex_peak_rss", None))
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.atrex_peak_rss = usage.ru_maxrss * 1024  # Linux reports KiB
    return Exit(proc.returncode, proc.atrex_peak_rss)


def describe_exit(ended: Exit, oom_before: int | None = None,
                  limit_bytes: int | None = None) -> str:
    """'died with SIGKILL', or why it was most likely the kernel's OOM killer that sent it."""
    code = ended.code
    if code >= 0:
        return "stopped after a CUDA error" if code == 3 else f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"died with signal {-code}"
    if -code != signal.SIGKILL:
        return f"died with {name}"
    reason = oom_reason(ended, oom_before, limit_bytes)
    return f"was killed by the kernel's OOM killer ({reason})" if reason else f"died with {name}"


def oom_reason(ended: Exit, oom_before: int | None, limit_bytes: int | None) -> str | None:
    after = oom_kills() if oom_before is not None else None
    peak = ended.peak_rss_bytes
    limit = limit_bytes if limit_bytes is not None else memory_limit_bytes()
    usage = f"peak RSS {_gib(peak)}" + (f" of {_gib(limit)}" if limit else "") if peak else None
    if after is not None and after > oom_before:
        return "SIGKILL, the cgroup counted an OOM kill" + (f"; {usage}" if usage else "")
    if peak and limit and peak >= OOM_SHARE * limit:
        return f"SIGKILL with {usage}: out of memory"
    return None


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f} GiB"
