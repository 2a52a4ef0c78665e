"""Telling an out-of-memory kill apart: real child processes, their real peak RSS."""

from __future__ import annotations

import signal
import subprocess
import sys

from atrex.runner import memory

MIB = 1 << 20

# Touches 96 MiB (a multiplied bytes object is written, so its pages are resident), then dies
# the way the kernel's OOM killer ends a process.
GROW_AND_DIE = (
    "import os, signal\n"
    "block = b'x' * (96 << 20)\n"
    "os.kill(os.getpid(), signal.SIGKILL)\n")


def run_child(code: str) -> memory.Exit:
    proc = subprocess.Popen([sys.executable, "-c", code])
    return memory.wait_exit(proc)


def test_sigkill_near_the_memory_limit_is_reported_as_the_oom_killer():
    ended = run_child(GROW_AND_DIE)
    assert ended.code == -signal.SIGKILL
    assert ended.peak_rss_bytes >= 96 * MIB
    text = memory.describe_exit(ended, limit_bytes=160 * MIB)
    assert text.startswith("was killed by the kernel's OOM killer (SIGKILL with peak RSS")
    assert "of 0.2 GiB: out of memory" in text


def test_sigkill_far_below_the_limit_is_just_a_sigkill():
    ended = run_child(GROW_AND_DIE)
    assert memory.describe_exit(ended, limit_bytes=64 * 1024 * MIB) == "died with SIGKILL"


def test_other_endings_keep_their_words():
    assert memory.describe_exit(run_child("import sys; sys.exit(4)")) == "exited with code 4"
    assert memory.describe_exit(memory.Exit(-signal.SIGSEGV)) == "died with SIGSEGV"
    assert memory.describe_exit(memory.Exit(3)) == "stopped after a CUDA error"


def test_the_budget_is_half_the_memory_this_process_may_use():
    limit = memory.memory_limit_bytes()
    assert limit is not None and limit > 0
    assert memory.default_budget_bytes() == int(limit * memory.DEFAULT_BUDGET_FRACTION)
