"""`atrex bench` end to end on the CPU: baselines judged and reported, timing unavailable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_runs_end_to_end_without_gpu(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "atrex", "bench", "examples/kernels", "--op", "rmsnorm",
         "--baselines", "eager,compile,kb", "--compile-mode", "default", "--device", "cpu",
         "--json", str(out), "--markdown", "-", "--plot", str(tmp_path / "bench.png"),
         "--bars", str(tmp_path / "bars.png")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["baselines"] == ["eager", "compile", "kb"] and not doc["timing_available"]
    (instance,) = doc["instances"]
    assert instance["op"] == "rmsnorm" and instance["weight"] is not None
    for label in ("eager", "compile", "kb"):
        shapes = instance["results"][label]["shapes"]
        assert shapes and all(s["status"] == "pass" and s["time_ms"] is None
                              for s in shapes.values()), shapes
    assert result.stdout.startswith("## atrex bench") and "n/a (no GPU)" in result.stdout
    assert "Weight (% of GPU time)" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("atrex bench: [")]
    assert [line.split("] ")[1].split(" (")[0] for line in progress] == ["rmsnorm / cpu-small"]
    for png in ("bench.png", "bars.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_bench_rejects_unknown_baseline():
    result = subprocess.run([sys.executable, "-m", "atrex", "bench", "examples/kernels",
                             "--baselines", "eager,triton"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and "unknown ['triton']" in result.stderr
