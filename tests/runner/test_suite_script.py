"""benchmarks/suite_h200.sh on the CPU (DEVICE=cpu): the sequence the next GPU session runs,
detached and polled, with one small operator: bench with the library contestant on one lane,
the trace weights (a tiny Llama) and the repeat script on the other, the packed results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_sequence_runs_detached_on_the_cpu(tmp_path):
    pytest.importorskip("transformers")
    env = {**os.environ, "DEVICE": "cpu", "OPS": "per_token_group_fp8_quant", "ATREX_COMMIT": "x",
           "PYTHON": sys.executable,
           "BASELINES": "eager,library,kb", "COMPILE_MODE": "default", "REPEAT_RUNS": "1",
           "REPEAT_SHAPES": "per_token_group_fp8_quant/cpu-small", "WAIT_S": "600", "LANES": "2",
           "TINY": "1", "BATCH": "2", "PROMPT": "8", "STEPS": "2",
           "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work")}
    result = subprocess.run(["bash", "benchmarks/suite_h200.sh"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "sequence finished" in result.stdout, result.stdout
    for stage in ("bench", "repeat", "weights"):
        assert f"rc.{stage}: 0" in result.stdout, result.stdout
    with tarfile.open(tmp_path / "out" / "suite-h200.tgz") as tar:
        names = set(tar.getnames())
        assert {"./h200-suite.json", "./h200-suite.md", "./repeat-h200.json",
                "./versions.txt", "./commit.txt", "./weights/weights.json",
                "./weights/metadata/per_token_group_fp8_quant.json"} <= names, names
        assert not any(n.startswith("./tree/") for n in names)
        doc = json.load(tar.extractfile("./h200-suite.json"))
        repeat = json.load(tar.extractfile("./repeat-h200.json"))
    (instance,) = doc["instances"]
    assert doc["baselines"] == ["eager", "library", "kb"] and doc["complete"]
    assert instance["results"]["library"]["status"] == "absent"
    assert instance["results"]["kb"]["status"] == "pass"
    assert repeat["complete"] and repeat["shapes"][0]["statuses"] == ["pass"]


def test_a_new_sequence_needs_the_commit_it_runs(tmp_path):
    """The device copy of the tree has no .git: a sequence started without ATREX_COMMIT (as when
    the machine went back between calls and a continuing call started afresh) would publish
    results that name no commit, so it does not start."""
    env = {k: v for k, v in os.environ.items() if k != "ATREX_COMMIT"}
    env.update({"DEVICE": "cpu", "WAIT_S": "1", "OUT": str(tmp_path / "out"),
                "WORK": str(tmp_path / "work")})
    result = subprocess.run(["bash", "benchmarks/suite_h200.sh"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ATREX_COMMIT=<sha> is needed to start a sequence" in result.stderr
    assert not (tmp_path / "work" / "started").exists()
