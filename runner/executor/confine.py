"""What the executor gives up before it imports the candidate (Linux; nothing elsewhere).

The judge, the zygote and the evaluator refuse inspection (PR_SET_DUMPABLE 0, see
runner/judge/procs.py), so for another process of their user the kernel's ptrace check, the one
behind ptrace itself, process_vm_readv and /proc/PID/mem, environ and fd, asks for CAP_SYS_PTRACE.
A user's process has none; a root one has it, so a root executor gives it up here, with the
others that reach into another process's memory or into the kernel, and with them the right to
regain any of them (the bounding set, and no_new_privs against setuid and file-capability
binaries). The executor refuses inspection too, so one contestant cannot reach another.

Where the kernel has Landlock (5.13 on), the executor also restricts itself, root or not, to
writing only beneath the directories it is given (its scratch directory, the compile caches,
/dev for the GPU's device nodes): a candidate cannot rewrite atrex's code, the repository, the
judge's files or another contestant's. From Landlock ABI 6 it cannot signal, nor reach an
abstract unix socket of, a process outside the executor's own tree either. Reading stays open,
but for the paths the evaluator names as secrets (the bot worker's App key, settings, job store
and other repositories' caches and checkouts): those cannot be opened for reading at all.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
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


@dataclass(frozen=True)
class Confinement:
    """What `confine` achieved: the Landlock ABI that restricts writes (None where the kernel
    has no Landlock) and how many secret paths it hides from reads (0 without Landlock)."""

    landlock_abi: int | None
    hidden_paths: int


def confine(writable: Iterable[str], unreadable: Iterable[str] = (),
            own: Iterable[str] = ()) -> Confinement:
    """Called once, before the candidate is imported: restricts writes to `writable` and hides
    the files beneath `unreadable` but those beneath `own` (the candidate's own checkout, where
    it lies in a hidden directory of every job's checkouts). Raises OSError when a step the
    kernel offers fails, so an executor never runs a candidate half-confined."""
    if not sys.platform.startswith("linux"):
        return Confinement(None, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    _prctl(libc, _PR_SET_DUMPABLE, 0)
    _prctl(libc, _PR_SET_NO_NEW_PRIVS, 1)  # also what Landlock asks of an unprivileged caller
    _drop_capabilities(libc, list(GIVEN_UP.values()))
    return _restrict(libc, writable, unreadable, own)


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


# --- Landlock (linux/landlock.h) ------------------------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every arch
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_O_PATH = getattr(os, "O_PATH", 0o10000000)
# every right that creates, changes or removes something is handled; executing stays unhandled,
# so allowed everywhere, and reading too unless a path is hidden (then READ_FILE is handled and
# granted beside it). (IOCTL_DEV, ABI 5, stays unhandled: CUDA drives the GPU by ioctl.)
_READ_FILE = 1 << 2
_WRITES_BY_ABI = {1: 1 << 1 | sum(1 << bit for bit in range(4, 13)),  # WRITE_FILE; REMOVE_*
                  2: 1 << 13,  # REFER: renames and links across directories    and MAKE_*
                  3: 1 << 14}  # TRUNCATE
_SCOPES_FROM_ABI = 6  # SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
_SCOPES = 0b11


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi(libc) -> int | None:
    version = libc.syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return version if version > 0 else None  # ENOSYS (no Landlock) or EOPNOTSUPP (disabled)


def _restrict(libc, writable: Iterable[str], unreadable: Iterable[str],
              own: Iterable[str]) -> Confinement:
    abi = landlock_abi(libc)
    if abi is None:
        return Confinement(None, 0)
    hidden = hidden_paths(unreadable)
    reads = _READ_FILE if hidden else 0
    writes = sum(bits for level, bits in _WRITES_BY_ABI.items() if abi >= level)
    attr = _RulesetAttr(writes | reads, 0, _SCOPES if abi >= _SCOPES_FROM_ABI else 0)
    size = ctypes.sizeof(attr) if abi >= _SCOPES_FROM_ABI else ctypes.sizeof(ctypes.c_uint64)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if ruleset < 0:
        _check(ruleset, "landlock_create_ruleset")
    try:
        for path in sorted(set(writable)):
            _allow_beneath(libc, ruleset, path, writes | reads)
        for path in [*readable_around(hidden), *(own if reads else ())]:
            _allow_beneath(libc, ruleset, path, reads, make=False)
        _check(libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return Confinement(abi, len(hidden))


def hidden_paths(unreadable: Iterable[str]) -> set[str]:
    """The paths `confine` hides from reads where Landlock confines: those of `unreadable` that
    exist, resolved (never the root, which would hide everything)."""
    return {os.path.realpath(path) for path in unreadable if os.path.lexists(path)} - {"/"}


def readable_around(hidden: set[str]) -> list[str]:
    """Landlock only grants, so hiding a path means granting reads beneath everything beside it:
    every entry of each directory on the way down to a hidden path, except the hidden paths, the
    directories on those ways (their own entries are granted instead) and symlinks (reading
    through one is checked where it leads)."""
    ways = {parent for path in hidden for parent in _parents(path)} - hidden
    granted = []
    for directory in sorted(ways):
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue  # unreadable to this user anyway
        granted += [entry.path for entry in entries
                    if entry.path not in hidden | ways and not entry.is_symlink()]
    return granted


def _parents(path: str) -> list[str]:
    parents = []
    while path != "/":
        path = os.path.dirname(path)
        parents.append(path)
    return parents


def _allow_beneath(libc, ruleset: int, path: str, access: int, make: bool = True) -> None:
    """A rule for `path` (a directory, or a file for reading), the directory made first where it
    is missing; one that cannot be made (a cache path on a container's read-only root) could not
    be written anyway, and gets none."""
    try:
        if make:
            os.makedirs(path, exist_ok=True)
        fd = os.open(path, _O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        rule = _PathBeneath(access if os.path.isdir(path) else access & _READ_FILE, fd)
        _check(libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0),
               f"landlock_add_rule({path})")
    finally:
        os.close(fd)
