"""Scratch directories for judge runs that a killed evaluator does not leave behind.

Each job's directory (the judge's and its executors' TMPDIR and HOME, their Triton and Inductor
caches included) is removed when the job ends. A process killed before that (SIGKILL, the OOM
killer) cannot clean up, so every directory holds an `.owner` file that its process keeps
flock-ed for as long as it lives; the kernel drops the lock when the process dies, however it
dies. Before a job makes its directory, it removes those whose lock it can take.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFIX = "atrex-judge-"
OWNER = ".owner"


@contextlib.contextmanager
def job_scratch(root: Path | None = None) -> Iterator[Path]:
    """A fresh directory under `root` (the temp directory by default), locked by this process
    until the block ends, after orphans of killed processes are removed."""
    root = Path(root or tempfile.gettempdir())
    sweep_orphans(root)
    with tempfile.TemporaryDirectory(prefix=PREFIX, dir=root) as made:
        scratch = Path(made)
        with _owner_lock(scratch):
            yield scratch


@contextlib.contextmanager
def _owner_lock(scratch: Path) -> Iterator[None]:
    # locked under another name, then renamed: a sweep never sees an .owner nobody holds yet
    pending = scratch / f"{OWNER}.{os.getpid()}"
    with open(pending, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        pending.rename(scratch / OWNER)
        yield


def sweep_orphans(root: Path) -> list[Path]:
    """Remove the job directories under `root` whose owner has died; what was removed."""
    removed = []
    for path in root.glob(PREFIX + "*"):
        if path.is_dir() and not path.is_symlink() and _owner_gone(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _owner_gone(path: Path) -> bool:
    """Whether the directory's .owner lock is free (its process is gone). No .owner (a directory
    being set up, or made by an older atrex) counts as owned."""
    try:
        fd = os.open(path / OWNER, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
