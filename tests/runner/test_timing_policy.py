"""The timing stop rule (standard error AND the block spread of the samples) and the launch floor
against a shape's time: pure functions."""

from __future__ import annotations

import json

from atrex.runner.evaluate import _apply_launch_floor, _timing_note
from atrex.runner.judge.timing import TimingPolicy, block_spread, stop_reason
from atrex.runner.model import ShapeResult, Status
from atrex.runner.peaks import load_launch_floor
from atrex.runner.render import fmt_roofline


def test_block_spread_of_steady_and_drifting_samples():
    steady = [1.0, 1.01, 0.99, 1.0] * 10
    assert block_spread(steady, 5) < 0.02
    drifting = [1.0 + i * 0.002 for i in range(40)]  # 8% drift over the run
    assert block_spread(drifting, 5) > 0.05
    assert block_spread([1.0] * 9, 5) is None  # fewer than two samples per block


def test_stop_reason_says_which_target_was_missed_and_which_limit_ended_it():
    policy = TimingPolicy()
    steady = [1.0, 1.01, 0.99, 1.0] * 10
    assert stop_reason(steady, policy, len(steady), 0.5) == "converged"
    drifting = [1.0 + i * 0.002 for i in range(40)]
    reason = stop_reason(drifting, policy, 40, 31.0)
    assert "block spread" in reason and "> 2%" in reason and "time limit (30 s)" in reason
    assert "repetition limit (40)" in stop_reason(drifting, TimingPolicy(max_reps=40), 40, 1.0)


def test_timing_note_keeps_graph_notes_and_missed_targets():
    assert _timing_note({"stop": "converged", "graph_notes": []}) is None
    note = _timing_note({"stop": "block spread 3.00% > 2% after 50 repetitions",
                         "graph_notes": ["32 calls per replay: out of memory"]})
    assert note.startswith("32 calls per replay: out of memory; block spread")
    plan = {"calls": 15, "restored": ["k_cache", "v_cache"],
            "reason": "15 calls: 256.3 MiB of input copies and outputs per call"}
    note = _timing_note({"stop": "converged", "method": "cuda_graph", "graph_plan": plan})
    assert note == ("restored before every repetition: k_cache, v_cache; 15 calls: 256.3 MiB "
                    "of input copies and outputs per call")


def test_launch_bound_time_against_max_of_sol_and_the_launch_floor():
    shape = ShapeResult(id="decode", status=Status.PASS, time_ms=0.002, sol_ms=0.0003,
                        roofline_fraction=0.15, launch_bound=True)
    _apply_launch_floor(shape, 0.0015)
    assert shape.launch_floor_ms == 0.0015 and shape.launch_floor_fraction == 0.75
    assert fmt_roofline(shape) == "0.150 (0.75 of max(SOL, launch floor 1.5 µs))"
    big = ShapeResult(id="prefill", status=Status.PASS, time_ms=0.1, sol_ms=0.08,
                      launch_bound=False)
    _apply_launch_floor(big, 0.0015)
    assert big.launch_floor_fraction is None


def test_the_launch_floor_comes_from_the_calibration_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ATREX_CACHE_DIR", str(tmp_path))
    assert load_launch_floor("h200_sxm") is None
    (tmp_path / "calibration-h200_sxm.json").write_text(json.dumps(
        {"tflops": {"bf16": 771}, "bandwidth_tbps": 4.24, "launch_floor_ms": 0.0021}))
    assert load_launch_floor("h200_sxm") == 0.0021
