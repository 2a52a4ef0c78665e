"""What the executor gives up before it imports the candidate (Linux; nothing elsewhere).

The judge, the zygote and the evaluator refuse inspection (PR_SET_DUMPABLE 0, see
runner/judge/procs.py), so for another process of their user the kernel's ptrace check, the one
behind ptrace itself, process_vm_readv and /proc/PID/mem, environ and fd, asks for CAP_SYS_PTRACE.
A user's process has none; a root one has it, so a root executor gives it up here, with the
others that reach into another process's memory or into the kernel, and with them the right to
regain any of them (the bounding set, and no_new_privs against setuid and file-capability
binaries). The executor refuses inspection too, so one contestant cannot reach another.
"""

from __future__ import annotations

import ctypes
import sys

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_READ = 23
_CAPABILITY_VERSION_3 = 0x20080522
CAP_SETPCAP = 8

# capability numbers (linux/capability.h): ptrace and /proc of any process, kernel modules, raw
# I/O (/dev/mem), mount / namespaces / much else, BPF programs that read any memory, perf events
# on other processes
CAP_SYS_PTRACE = 19
GIVEN_UP = {"CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_PTRACE": CAP_SYS_PTRACE,
            "CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def confine() -> None:
    """Called once, before the candidate is imported. Raises OSError when a step the kernel
    allows fails, so an executor never runs a candidate half-confined."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    _prctl(libc, _PR_SET_DUMPABLE, 0)
    _prctl(libc, _PR_SET_NO_NEW_PRIVS, 1)
    _drop_capabilities(libc, list(GIVEN_UP.values()))


def _drop_capabilities(libc, numbers) -> None:
    """Out of the bounding set where this process may change it (CAP_SETPCAP: root), then out of
    the effective, permitted and inheritable sets (which takes them out of the ambient set too).
    A set that holds none of them is left alone: in a container without capabilities nothing is
    asked of the kernel."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.capget(ctypes.byref(header), data), "capget")
    if data[0].effective & (1 << CAP_SETPCAP):
        for number in _bounding(libc, numbers):
            _prctl(libc, _PR_CAPBSET_DROP, number)
    changed = False
    for number in numbers:
        word, bit = divmod(number, 32)
        for field in ("effective", "permitted", "inheritable"):
            value = getattr(data[word], field)
            if value & (1 << bit):
                setattr(data[word], field, value & ~(1 << bit))
                changed = True
    if changed:
        _check(libc.capset(ctypes.byref(header), data), "capset")


def _bounding(libc, numbers) -> list[int]:
    """Those of `numbers` still in the bounding set (PR_CAPBSET_READ; a number the kernel does
    not know, such as CAP_BPF before 5.8, reads as EINVAL and is skipped)."""
    held = []
    for number in numbers:
        if libc.prctl(_PR_CAPBSET_READ, number, 0, 0, 0) == 1:
            held.append(number)
    return held


def _prctl(libc, option: int, value: int) -> None:
    _check(libc.prctl(option, value, 0, 0, 0), f"prctl({option}, {value})")


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"executor confinement: {what} failed")
