"""Nothing outlives its evaluator: kill -9 of the evaluator takes the judge and its executors
down too (each asks Linux to kill it when its parent dies)."""

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


def processes_of(parent: int, module: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if module in cmdline and int(stat[1]) == parent:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_judge_and_executors_die_with_their_evaluator(tmp_path):
    evaluator = subprocess.Popen([sys.executable, "-c", EVALUATOR, str(CORPUS), str(tmp_path)],
                                 cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    judges: list[int] = []
    executors: list[int] = []
    while not executors and time.monotonic() < deadline:
        time.sleep(0.5)
        judges = processes_of(evaluator.pid, b"runner.judge")
        executors = [pid for judge in judges for pid in processes_of(judge, b"runner.executor")]
    assert judges and executors, "the evaluator never started a judge with an executor"
    time.sleep(8)  # let the executor get into the hanging candidate
    evaluator.send_signal(signal.SIGKILL)
    evaluator.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in judges + executors) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in judges + executors)
