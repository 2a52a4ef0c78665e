"""Nothing outlives its evaluator: kill -9 of the evaluator takes every process it started down
too (the zygote, judges and executors each ask Linux to kill them when their parent dies), and
the scratch directory it could not remove goes with the next job's sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from atrex.runner.scratch import sweep_orphans

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "adversarial"

EVALUATOR = textwrap.dedent("""
    import shutil, sys
    from pathlib import Path
    from atrex.runner.evaluate import EvalOptions, evaluate
    from atrex.runner.repo import load_repo
    from atrex.runner.sandbox import CandidateRef
    corpus, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    shutil.copytree(corpus / "ops" / "rmsnorm", tmp / "repo" / "rmsnorm")
    shutil.copytree(corpus / "ops" / "rmsnorm", tmp / "cand")
    shutil.copy(corpus / "crashes" / "hang.py", tmp / "cand" / "kernel.py")
    evaluate(load_repo(tmp / "repo"), {"rmsnorm": [CandidateRef("h", tmp / "cand" / "kernel.py",
             tmp / "cand")]}, EvalOptions(device="cpu", timeout_s=600))
""")


def _table() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent, command line + process name)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes() + b" " + (entry / "comm").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat[0] != "Z":
            table[int(entry.name)] = (int(stat[1]), cmdline)
    return table


def descendants(root: int) -> dict[int, bytes]:
    table = _table()
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmdline) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = cmdline
                frontier.append(pid)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("zygote", ["1", "0"], ids=["forked", "fresh-interpreters"])
def test_judge_and_executors_die_with_their_evaluator(tmp_path, zygote):
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ATREX_ZYGOTE": zygote, "TMPDIR": str(temp)}
    evaluator = subprocess.Popen([sys.executable, "-c", EVALUATOR, str(CORPUS), str(tmp_path)],
                                 cwd=ROOT, env=env)
    deadline = time.monotonic() + 120
    tree: dict[int, bytes] = {}
    while time.monotonic() < deadline:
        time.sleep(0.5)
        tree = descendants(evaluator.pid)
        roles = b" ".join(tree.values())
        if b"judge" in roles and b"executor" in roles:
            break
    roles = b" ".join(tree.values())
    assert b"judge" in roles and b"executor" in roles, \
        f"the evaluator never started a judge with an executor: {tree}"
    time.sleep(8)  # let the executor get into the hanging candidate
    tree = descendants(evaluator.pid)
    evaluator.send_signal(signal.SIGKILL)
    evaluator.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [tree[pid] for pid in tree if alive(pid)]
    left = list(temp.glob("atrex-judge-*"))
    assert len(left) == 1  # the killed evaluator's job directory
    assert sweep_orphans(temp) == left and not left[0].exists()
