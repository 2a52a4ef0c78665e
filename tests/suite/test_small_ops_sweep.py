"""The launch-configuration sweep of issue 15 (benchmarks/small_ops_h200.py): an unknown
operator is refused before anything runs. Every variant's CPU check and the committed results'
summary: tests/suite/test_sweeps_cpu.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "small_ops_h200.py"


def test_an_unknown_operator_is_refused(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "x.json"), "--device",
                          "cpu", "--ops", "rope,nope"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert run.returncode == 2
    assert "nope" in run.stderr
    assert not (tmp_path / "x.json").exists()
