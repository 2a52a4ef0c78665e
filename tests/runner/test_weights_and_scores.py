"""Shape weights from trace metadata, and the scoring formulas of DESIGN §3.6."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from atrex.runner import scoring
from atrex.runner.model import OpResult, Peaks, ShapeResult, Status
from atrex.runner.repo import load_repo

EXAMPLE_OP = Path(__file__).resolve().parents[2] / "tests" / "adversarial" / "ops" / "rmsnorm"
H200 = Peaks(source="datasheet", tflops={"bf16": 989.4, "fp32": 66.9}, bandwidth_tbps=4.8)


def test_weights_from_call_count_and_duration(tmp_path):
    op = tmp_path / "rmsnorm"
    shutil.copytree(EXAMPLE_OP, op)
    (op / "metadata.json").write_text(json.dumps({"importance_score": 0.2, "shapes": {
        "cpu": {"call_count": 14},
        "gpu": {"total_duration_us": 1000.0, "production_performance": {"performance_us": 4.0}},
    }}))
    spec = load_repo(tmp_path).ops[0]
    assert spec.shape("cpu").weight == 14
    assert spec.shape("gpu").weight == 250  # 1000 us over 4 us per call
    assert spec.weight_source == "trace" and spec.importance == 0.2


def test_uniform_weights_without_metadata(tmp_path):
    shutil.copytree(EXAMPLE_OP, tmp_path / "rmsnorm")
    spec = load_repo(tmp_path).ops[0]
    assert {s.weight for s in spec.shapes} == {1.0} and spec.weight_source == "uniform"


def test_sol_is_the_larger_of_compute_and_memory():
    # 4.8 GB at 4.8 TB/s is 1 ms; 0.9894 TFLOP of bf16 at 989.4 TFLOP/s is 1 ms
    assert scoring.sol_ms({}, 4.8e9, H200) == pytest.approx(1.0)
    assert scoring.sol_ms({"bf16": 2 * 989.4e9}, 4.8e9, H200) == pytest.approx(2.0)
    assert scoring.bound({"bf16": 2 * 989.4e9}, 4.8e9, H200) == "compute"
    assert scoring.sol_ms({}, 1.0, None) is None


def shape(sid, weight, time_ms, sol_ms, status=Status.PASS):
    return ShapeResult(id=sid, status=status, weight=weight, time_ms=time_ms, sol_ms=sol_ms)


def test_op_efficiency_is_gpu_hour_weighted():
    shapes = [shape("decode", 100, 0.010, 0.005), shape("prefill", 1, 1.0, 0.9)]
    # ideal 100*0.005 + 0.9 = 1.4 over actual 100*0.01 + 1.0 = 2.0
    assert scoring.op_efficiency(shapes) == pytest.approx(0.7)


def test_a_failing_shape_zeroes_the_op():
    shapes = [shape("a", 1, 1.0, 0.9), shape("b", 1, None, 0.5, Status.FALLBACK)]
    assert scoring.op_efficiency(shapes) == 0.0


def test_untimed_op_has_no_score():
    assert scoring.op_efficiency([shape("a", 1, None, 0.5)]) is None


def test_importance_normalized_and_repo_score():
    weights = scoring.normalized_importance({"a": 0.6, "b": 0.3, "c": None})
    assert weights["c"] == pytest.approx(0.45 / 1.35)
    assert sum(weights.values()) == pytest.approx(1.0)
    ops = [OpResult("a", Status.PASS, score=0.5, importance=0.75),
           OpResult("b", Status.PASS, score=1.0, importance=0.25)]
    assert scoring.repo_score(ops) == pytest.approx(0.625)


def test_gpu_hours_at_stake():
    shapes = [shape("decode", 3.6e9, 0.010, 0.004)]  # 3.6e9 calls x 6 us = 6 hours
    assert scoring.gpu_hours_at_stake(shapes) == pytest.approx(6.0)
    assert scoring.gpu_hours_at_stake(shapes, trace_scale=2.0) == pytest.approx(12.0)
