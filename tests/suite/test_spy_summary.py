"""benchmarks/spy_summary.py on py-spy's collapsed stacks: per process, the project frames the
samples passed through and the frames that held them, and exit code 2 for a file that is not
py-spy's output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "spy_summary.py"

RAW = """\
process 10:"python -m pytest";main (runner/bench.py:5);wait (runner/judge/procs.py:9) 30
process 11:"zygote judge";main (runner/judge/main.py:79);compare (runner/judge/oracle.py:233);\
_errors (runner/judge/compare.py:151) 60
process 11:"zygote judge";main (runner/judge/main.py:79);recv (runner/contract/wire.py:158) 10
"""


def _run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(path), "--top", "3"],
                          capture_output=True, text=True, timeout=60)


def test_each_process_its_share_and_where_it_went(tmp_path):
    raw = tmp_path / "spy.raw"
    raw.write_text(RAW)
    result = _run(raw)
    assert result.returncode == 0, result.stderr
    judge, pytest_part = result.stdout.split("## ")[1:]
    assert judge.startswith('process 11:"zygote judge": 70 samples (70.0%)')
    # main is on every stack of the judge, so only the frames that split its time are shown
    assert "main (runner/judge/main.py:79)" not in judge.split("self")[0]
    assert "incl  85.7%  compare (runner/judge/oracle.py:233)" in judge
    assert "self  85.7%  _errors (runner/judge/compare.py:151)" in judge
    assert "self  14.3%  recv (runner/contract/wire.py:158)" in judge
    assert pytest_part.startswith('process 10:"python -m pytest": 30 samples (30.0%)')


def test_a_file_that_is_not_collapsed_stacks_is_refused(tmp_path):
    raw = tmp_path / "spy.raw"
    raw.write_text("Collecting samples from pid 10\n")
    result = _run(raw)
    assert result.returncode == 2
    assert str(raw) in result.stderr and "collapsed stacks" in result.stderr
