from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NAIVE = ROOT / "benchmarks" / "agent_naive"
sys.path.insert(0, str(HERE))  # the fakes and scripted kernels next to the tests

_SPEEDUP = re.compile(r"^# atrex-test-speedup: ([0-9.e+]+)$", re.M)
BASE_FRACTION = 0.05


def speedup_timer(source: str, shape) -> float:
    """Test seam for the CPU (no timing there): a deterministic time from a comment in the source.

    The baseline (no comment) runs at BASE_FRACTION of roofline; ``# atrex-test-speedup: X`` makes
    a candidate X times faster. Only ever used where the runner measured no time.
    """
    match = _SPEEDUP.search(source)
    speedup = float(match.group(1)) if match else 1.0
    return shape.sol_ms / BASE_FRACTION / speedup


@pytest.fixture
def naive_ops(tmp_path) -> Path:
    """A private copy of the naive operators (cpu-small shapes run under the Triton interpreter)."""
    target = tmp_path / "ops"
    shutil.copytree(NAIVE, target, ignore=shutil.ignore_patterns("__pycache__", "README.md"))
    return target
