"""A worker never outlives its evaluator: kill -9 of the evaluator takes the worker down too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "adversarial"

EVALUATOR = textwrap.dedent("""
    import shutil, sys
    from pathlib import Path
    from runner.evaluate import EvalOptions, evaluate
    from runner.repo import load_repo
    from runner.sandbox import CandidateRef
    corpus, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    shutil.copytree(corpus / "ops" / "rmsnorm", tmp / "repo" / "rmsnorm")
    shutil.copytree(corpus / "ops" / "rmsnorm", tmp / "cand")
    shutil.copy(corpus / "crashes" / "hang.py", tmp / "cand" / "kernel.py")
    evaluate(load_repo(tmp / "repo"), {"rmsnorm": [CandidateRef("h", tmp / "cand" / "kernel.py",
             tmp / "cand")]}, EvalOptions(device="cpu", timeout_s=600))
""")


def workers_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if b"runner.worker" in cmdline and int(stat[1]) == parent:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_worker_dies_with_its_evaluator(tmp_path):
    evaluator = subprocess.Popen([sys.executable, "-c", EVALUATOR, str(CORPUS), str(tmp_path)],
                                 cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while not workers and time.monotonic() < deadline:
        time.sleep(0.5)
        workers = workers_of(evaluator.pid)
    assert workers, "the evaluator never started a worker"
    time.sleep(8)  # let the worker get into the hanging candidate
    evaluator.send_signal(signal.SIGKILL)
    evaluator.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers)
