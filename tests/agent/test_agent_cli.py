"""The command line and the H200 script's plumbing on the CPU, in subprocesses where openai, github
and git cannot be imported (as on the GPU image): the optimize path must not need them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

BLOCKER = '''import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("openai", "github", "git"):
            raise ImportError(f"{name} is not installed on the GPU image")
        return None
sys.meta_path.insert(0, _Block())
'''


@pytest.fixture
def bare_env(tmp_path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    env.pop("OPENAI_API_KEY", None)
    return env


def test_blocker_works(bare_env):
    proc = subprocess.run([sys.executable, "-c", "import openai"], env=bare_env,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "not installed on the GPU image" in proc.stderr


def test_optimize_cli_on_cpu_without_optional_libraries(naive_ops, tmp_path, bare_env):
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "atrex.agent", "optimize", str(naive_ops), "--op", "silu_and_mul",
         "--proposer", "kb", "--proposer", "autotune", "--max-iters", "2", "--device", "cpu",
         "--autotune-batch", "1", "--out", str(out)],
        cwd=ROOT, env=bare_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert [a["proposer"] for a in attempts] == ["baseline", "kb", "autotune"]
    assert attempts[1]["status"] == "pass" and attempts[1]["meta"]["kb_entry"] == \
        "silu-and-mul-2d-grid"
    assert "no timing on this device" in attempts[1]["reason"]  # CPU: verified, never "faster"
    assert (out / "kernel.py").read_text() == (naive_ops / "silu_and_mul" / "kernel.py").read_text()
    assert "incumbent: pass" in proc.stderr and "baseline: pass" in proc.stderr


def test_cli_usage_errors(naive_ops, bare_env):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "atrex.agent", "optimize", str(naive_ops),
        *args],
                              cwd=ROOT, env=bare_env, capture_output=True, text=True)

    unknown = run("--op", "nope")
    assert unknown.returncode == 2 and "no operator named nope" in unknown.stderr
    proposer = run("--op", "rmsnorm", "--proposer", "gpt5")
    assert proposer.returncode == 2 and "unknown proposer" in proposer.stderr
    llm = run("--op", "rmsnorm", "--proposer", "llm")
    assert llm.returncode == 2 and "needs --model" in llm.stderr


@pytest.mark.slow
def test_h200_script_plumbing_on_cpu(tmp_path, bare_env):
    out = tmp_path / "h200"
    env = dict(bare_env, OUT=str(out), DEVICE="cpu", MAX_ITERS="1", NCU="off",
               AUTOTUNE_BATCH="1", PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "agent_h200.sh"), "softmax"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("environment.txt", "summary.md", "softmax.log", "softmax/attempts.jsonl",
                 "softmax/kernel.py", "softmax/summary.json"):
        assert (out / name).is_file(), name
    summary = (out / "summary.md").read_text()
    assert "| softmax | pass -> pass |" in summary and "cpu-small" in summary
    assert "device: cpu" in (out / "environment.txt").read_text()
    assert not list(Path(out).rglob("__pycache__"))
