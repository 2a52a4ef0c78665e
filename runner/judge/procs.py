"""Processes the judge can see from outside: its executors, and anything they started.

The judge is a child subreaper, so a process an executor double-forks away is re-parented to the
judge instead of init, and a scan of /proc finds it. Nothing here depends on the executor's
cooperation.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4


def become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)


def refuse_inspection() -> None:
    """No other process of this user may read this one's memory, environment or descriptors
    through /proc, or attach to it with ptrace: the kernel then asks for CAP_SYS_PTRACE, which an
    executor gives up before it loads a candidate (runner/executor/confine.py). For the judge
    (expected outputs, verdicts), the zygote and the evaluator (a bot worker's tokens). Also means
    no core dumps, and a debugger attaches only as root."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0)


def die_with_parent() -> None:
    """A judge whose evaluator was killed (kill -9 of a bot worker) must not keep the GPU busy
    under a retried job: ask Linux to kill us when the parent goes."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the request took effect
        os._exit(1)


def _parents() -> dict[int, int]:
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if stat[0] != "Z":
                table[int(entry.name)] = int(stat[1])
    return table


def strays(executor: int, executors: list[int]) -> list[int]:
    """Live processes an executor started: its descendants, and orphans re-parented to the judge
    (the judge's children that are none of its executors)."""
    table = _parents()
    me = os.getpid()
    found = [pid for pid, parent in table.items() if parent == me and pid not in executors]
    frontier = [executor]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in table.items() if ppid == parent]
        found += children
        frontier += children
    return sorted(set(found))


def command_line(pid: int) -> str:
    """The command line, and the process name where it differs (a process forked from the
    zygote keeps the zygote's command line but carries its own name)."""
    try:
        raw = (Path("/proc") / str(pid) / "cmdline").read_bytes()
        name = (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return "?"
    line = raw.replace(b"\0", b" ").decode(errors="replace").strip()[:120] or "?"
    return line if name in line else f"{name}: {line}"


def kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
