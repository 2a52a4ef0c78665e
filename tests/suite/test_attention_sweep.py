"""The attention sweep of issue 13 (benchmarks/attention_h200.py) on the CPU: every variant of the
three attention kernels' launch constants (the interpreter-visible ones: tiles, splits, tensor
descriptors, the heads-as-columns MLA kernel, the merge's heads per program) is correct under the
interpreter at the CPU shapes (ragged lengths, a sequence of one token, a padded block table), so
the GPU run only has to time them; and the committed H200 sweeps summarize."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "attention_h200.py"


def _sweep_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import attention_h200
    finally:
        sys.path.pop(0)
    return attention_h200


@pytest.mark.slow
def test_every_swept_attention_variant_is_correct_on_the_cpu(tmp_path):
    out = tmp_path / "sweep.json"
    run = subprocess.run([sys.executable, str(SCRIPT), str(out), "--device", "cpu"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(out.read_text())
    sweep = _sweep_module()
    assert doc["complete"] is True and set(doc["ops"]) == set(sweep.PLAN.grids)
    for name, op in doc["ops"].items():
        assert op["shapes"], name
        for row in op["shapes"]:
            expected = sweep.variants(sweep.PLAN, name, quick=False, device="cpu")
            assert [e["constants"] for e in row["variants"]] == expected, name
            for entry in row["variants"]:
                assert entry["mismatch"] is None and "error" not in entry, (name, entry)


def test_the_cpu_sweep_tries_each_interpreter_visible_variant_once():
    sweep = _sweep_module()
    gpu = sweep.variants(sweep.PLAN, "paged_decode_gqa", quick=False)
    cpu = sweep.variants(sweep.PLAN, "paged_decode_gqa", quick=False, device="cpu")
    assert len(cpu) < len(gpu)
    assert {c["NUM_STAGES"] for c in cpu} == {2}  # the interpreter ignores the pipeline depth
    assert len({json.dumps(c, sort_keys=True) for c in cpu}) == len(cpu)


def test_the_committed_attention_sweeps_summarize():
    results = sorted((ROOT / "benchmarks" / "results" / "h200-attention").glob("sweep-*/*.json"))
    assert results, "no committed sweep results"
    run = subprocess.run([sys.executable, str(SCRIPT), "--summarize", *map(str, results)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == sum(len(op["shapes"]) for path in results
                            for op in json.loads(path.read_text())["ops"].values())
    assert all("H200" in json.loads(p.read_text())["environment"]["gpu"] for p in results)
