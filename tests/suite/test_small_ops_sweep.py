"""The launch-configuration sweep of issue 15 (benchmarks/small_ops_h200.py) on the CPU: every
variant of every kernel's launch constants is correct under the interpreter at the CPU shapes
(ragged sizes, padding slots, sampling edge rows), so the GPU run only has to time them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "small_ops_h200.py"


@pytest.mark.slow
def test_every_swept_variant_is_correct_on_the_cpu(tmp_path):
    out = tmp_path / "sweep.json"
    run = subprocess.run([sys.executable, str(SCRIPT), str(out), "--device", "cpu"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["complete"] is True
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import small_ops_h200 as sweep
    finally:
        sys.path.pop(0)
    assert set(doc["ops"]) == set(sweep.VARIANTS)
    for name, op in doc["ops"].items():
        assert op["shapes"], name
        for row in op["shapes"]:
            assert len(row["variants"]) == len(sweep.variants(sweep.PLAN, name, quick=False,
                                                                 device="cpu")), name
            for entry in row["variants"]:
                assert entry["mismatch"] is None, (name, row["shape"], entry)
                assert "error" not in entry, (name, row["shape"], entry)


def test_an_unknown_operator_is_refused(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "x.json"), "--device",
                          "cpu", "--ops", "rope,nope"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert run.returncode == 2
    assert "nope" in run.stderr
    assert not (tmp_path / "x.json").exists()


def test_the_committed_sweeps_summarize_into_one_row_per_shape():
    results = sorted((ROOT / "benchmarks" / "results" / "h200-small-ops").glob("sweep-*/*.json"))
    assert results, "no committed sweep results"
    run = subprocess.run([sys.executable, str(SCRIPT), "--summarize", *map(str, results)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")][1:]
    shapes = sum(len(op["shapes"]) for path in results
                 for op in json.loads(path.read_text())["ops"].values())
    assert len(rows) == shapes
    assert all("H200" in json.loads(p.read_text())["environment"]["gpu"] for p in results)
