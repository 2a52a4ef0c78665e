"""The timing stop rule (standard error AND the block spread of the samples) and the launch floor
against a shape's time: pure functions."""

from __future__ import annotations

import json
import random

from atrex.runner.contract import protocol
from atrex.runner.evaluate import _apply_launch_floor, _timing_note
from atrex.runner.judge import timing as jt
from atrex.runner.judge.stages import Recheck, calls_to_check
from atrex.runner.judge.timing import TimingPolicy, block_spread, stop_reason
from atrex.runner.model import ShapeResult, Status
from atrex.runner.peaks import load_floors
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
    assert load_floors("h200_sxm").get("launch_floor_ms") is None
    (tmp_path / "calibration-h200_sxm.json").write_text(json.dumps(
        {"tflops": {"bf16": 771}, "bandwidth_tbps": 4.24, "launch_floor_ms": 0.0021}))
    assert load_floors("h200_sxm").get("launch_floor_ms") == 0.0021
    assert load_floors("h200_sxm").get("cold_read_floor_ms") is None  # calibrated before them
    (tmp_path / "calibration-h200_sxm.json").write_text(json.dumps(
        {"launch_floor_ms": 0.0021, "cold_read_floor_ms": 0.00098,
         "dependent_read_floor_ms": 0.00123}))
    assert load_floors("h200_sxm").get("cold_read_floor_ms") == 0.00098
    assert load_floors("h200_sxm").get("dependent_read_floor_ms") == 0.00123


class _Answers:
    """An executor's answers to TIME_BATCH as the judge reads them (data over the wire); each
    batch says the device waited for the host in every repetition while `waits` is true."""

    def __init__(self, waits: bool):
        self.waits = waits
        self.holds: list[int] = []
        self.spec = type("Spec", (), {"role": "candidate"})()

    def request(self, command, blobs=None, **fields):
        assert command == protocol.TIME_BATCH
        self.holds.append(fields["hold_cycles"])
        reps = fields["reps"]
        batch = protocol.TimingBatch(times_ms=[0.5] * reps, own_launches=[2] * reps,
                                     device_waited=[self.waits] * reps,
                                     enqueue_ms=[3.0] * reps)
        return {"batch": protocol.to_wire(batch)}, []


def test_a_batch_the_device_waited_in_is_timed_again_under_a_longer_hold():
    answers = _Answers(waits=True)
    entry = jt._Timed(answers, samples=[])
    for _ in range(len(protocol.HOLD_LADDER) + 1):
        jt._batch(entry, 10)
    # every shorter hold's batch was dropped; the longest one's are kept, the waits counted
    assert answers.holds == list(protocol.HOLD_LADDER) + [protocol.HOLD_LADDER[-1]]
    assert entry.retimed_batches == len(protocol.HOLD_LADDER) - 1
    assert entry.reps == 20 and entry.host_waits == 20 and entry.batches == 2
    assert entry.reps_by_hold == {protocol.HOLD_LADDER[-1]: 20}
    payload = jt._payload(entry, launch_bound=False, policy=jt.TimingPolicy())
    assert payload["hold_cycles"] == protocol.HOLD_LADDER[-1] and payload["enqueue_ms"] == 3.0
    note = _timing_note({**payload, "stop": "converged"})
    assert "device hold of 25,600,000 cycles" in note and "20 of 20 repetitions" in note


def test_a_batch_under_a_hold_the_host_kept_up_with_is_kept():
    answers = _Answers(waits=False)
    entry = jt._Timed(answers, samples=[])
    jt._batch(entry, 10)
    assert answers.holds == [protocol.HOLD_CYCLES] and entry.reps == 10
    assert entry.retimed_batches == 0 and entry.host_waits == 0
    assert _timing_note(jt._payload(entry, False, jt.TimingPolicy())) is None


def test_the_judges_clock_leaves_out_each_holds_fixed_cost():
    entry = jt._Timed(None, samples=[], wall_ms=100.0, batches=2, ping_ms=1.0, untimed_ms=2.0,
                      reps=20, reps_by_hold={protocol.HOLD_CYCLES: 10, protocol.HOLD_LADDER[1]: 10})
    fixed = jt.FixedCosts(device=None)
    fixed.samples_by_hold = {protocol.HOLD_CYCLES: [0.4, 0.5, 0.6],  # as measured
                             protocol.HOLD_LADDER[1]: [2.0, 1.9, 2.2]}
    assert fixed.total_ms(entry.reps_by_hold) == 25.0
    assert jt.judged_sample_ms(entry, fixed.total_ms(entry.reps_by_hold)) == (100 - 2 - 2 - 25) / 20


def _long_hold_entry(reported_ms: float, judged_ms: float, fixed_ms: float) -> tuple:
    """Twenty kept repetitions under the longest hold, the executor having said the device
    waited: `reported_ms` per sample on its clock, `judged_ms` beyond the fixed cost on the
    judge's, whose null repetitions at that hold took `fixed_ms`."""
    hold = protocol.HOLD_LADDER[-1]
    entry = jt._Timed(_Answers(waits=True), samples=[reported_ms] * 20,
                      wall_ms=20 * (fixed_ms + judged_ms), batches=2, reps=20,
                      reps_by_hold={hold: 20})
    fixed = jt.FixedCosts(device=None)
    fixed.samples_by_hold = {hold: [fixed_ms] * 6}
    return entry, fixed


def test_a_false_waited_does_not_widen_what_goes_unnoticed():
    # a 2.5 ms call reported as 0.2 ms: under the shortest hold the 1 ms slack calls it out,
    # and claiming waits to reach the 13 ms hold leaves the slack at 1 ms, so it still does
    entry, fixed = _long_hold_entry(reported_ms=0.2, judged_ms=2.5, fixed_ms=13.5)
    jt._wall_clock_check(entry, fixed)
    assert entry.problem is not None and entry.problem[0].value == "timing_mismatch"
    assert abs(entry.judged_ms - 2.5) < 1e-9


def test_an_honest_host_heavy_call_under_the_longest_hold_is_not_called_tampered():
    # 0.02 ms of device time, 0.5 ms of the unexplained per-repetition cost on the judge's clock
    entry, fixed = _long_hold_entry(reported_ms=0.02, judged_ms=0.5, fixed_ms=13.5)
    jt._wall_clock_check(entry, fixed)
    assert entry.problem is None


def test_the_judge_measures_a_longer_holds_cost_beside_each_batch_under_it(monkeypatch):
    measured = []
    monkeypatch.setattr(jt, "_fixed_rep_samples",
                        lambda device, hold, reps: measured.append((hold, reps)) or [1.0] * reps)
    fixed = jt.FixedCosts(device=None)
    entry = jt._Timed(_Answers(waits=True), samples=[])
    for _ in range(len(protocol.HOLD_LADDER) + 1):
        jt._batch(entry, 10, fixed.measure_beside)
    # batches dropped for a longer hold measure nothing; the two kept ones each measure beside
    assert measured == [(protocol.HOLD_LADDER[-1], jt.NULL_REPS_BESIDE)] * 2
    fixed.measure_beside(protocol.HOLD_CYCLES)  # the shortest hold's are taken before
    assert len(measured) == 2
    assert fixed.ms(protocol.HOLD_LADDER[-1]) == 1.0


def _rechecks(monkeypatch, results: list) -> list:
    """The judge's recheck answers in turn; returns the holds it was asked under."""
    answers, holds = iter(results), []
    monkeypatch.setattr(jt, "recheck", lambda ctx, oracle, contestant, timed, calls, hold:
                        holds.append(hold) or next(answers))
    return holds


def test_calls_on_new_values_far_slower_than_the_repetitions_are_skipped_work(monkeypatch):
    # the first new-values call kept the device waiting for the host: timed again, longer hold
    holds = _rechecks(monkeypatch, [Recheck(None, 5.0, device_waited=True), Recheck(None, 1.0),
                                    Recheck(None, 1.2), Recheck(None, 0.9)])
    entry = jt._Timed(_Answers(waits=False), samples=[0.1] * 20)
    jt._recheck(None, None, entry, {})
    assert holds == [protocol.HOLD_CYCLES] + [protocol.HOLD_LADDER[1]] * 3
    assert entry.new_values_ms == 1.0
    assert entry.problem[0].value == "output_cache" and "reused work" in entry.problem[1]
    assert jt._payload(entry, False, jt.TimingPolicy())["new_values_ms"] == 1.0


def test_calls_on_new_values_as_fast_as_the_repetitions_are_honest(monkeypatch):
    _rechecks(monkeypatch, [Recheck(None, 0.11), Recheck(None, 0.14), Recheck(None, 0.1)])
    entry = jt._Timed(_Answers(waits=False), samples=[0.1] * 20)
    jt._recheck(None, None, entry, {})
    assert entry.problem is None and entry.new_values_ms == 0.11
    # a baseline is never called a cache; a wrong output on new values is a failed recheck
    _rechecks(monkeypatch, [Recheck(None, 1.0)] * 3)
    baseline = jt._Timed(_Answers(waits=False), samples=[0.1] * 20)
    baseline.contestant.spec.role = "baseline"
    jt._recheck(None, None, baseline, {})
    assert baseline.problem is None
    _rechecks(monkeypatch, [Recheck(None, 0.1), Recheck("out: 3 elements outside", 0.1)])
    jt._recheck(None, None, entry, {})
    assert entry.problem[0].value == "recheck_failed"


def test_new_values_slower_by_under_the_floor_are_noise():
    assert jt.new_values_problem(0.004, 0.001) is None  # 4x, but 3 us
    assert jt.new_values_problem(0.019, 0.01) is None  # under 2x
    assert jt.new_values_problem(None, 0.01) is None
    assert "0.05 ms" in jt.new_values_problem(0.05, 0.01)


def test_a_timed_replays_first_call_and_three_others_are_checked():
    rng = random.Random(7)
    assert calls_to_check(1, rng) == [0] and calls_to_check(2, rng) == [0, 1]
    picks = [calls_to_check(32, rng) for _ in range(50)]
    assert all(p[0] == 0 and len(set(p)) == 4 and max(p) < 32 for p in picks)
    assert len({call for p in picks for call in p}) > 20  # the later calls vary


class _Checks(list):
    def append_reps(self, entry) -> None:
        self.append(entry.reps)


def test_the_last_timed_batch_is_checked_as_well_as_an_early_one():
    # a kernel honest for the first batches and skipping work later is checked where it skips
    for _ in range(5):
        entry = jt._Timed(_Answers(waits=False), samples=[])
        checked_after = _Checks()
        jt._measure({"kb": entry}, jt.TimingPolicy(min_reps=40), checked_after.append_reps)
        assert entry.stop == "converged" and entry.reps == 40
        assert checked_after[-1] == 40 and checked_after[0] <= 40
        assert len(checked_after) == len(set(checked_after))  # no batch checked twice


def test_what_the_judge_subtracts_is_capped_by_its_measurement_before_any_candidate_ran():
    # GPU work kept running while the judge measured (a taken-over executor) inflates the null
    # repetitions; the cap is what they took before any candidate was loaded, with a margin
    hold = protocol.HOLD_LADDER[-1]
    fixed = jt.FixedCosts(device=None, clean_ms={hold: 13.0, protocol.HOLD_CYCLES: 0.3})
    fixed.samples_by_hold = {hold: [25.0] * 6, protocol.HOLD_CYCLES: [0.31] * 30}
    assert fixed.ms(hold) == jt.CLEAN_MARGIN * 13.0
    assert fixed.ms(protocol.HOLD_CYCLES) == 0.31  # a measurement under the cap stands
    # the judge's clock saw 6 ms per repetition beyond the clean 13 ms and the executor said
    # 0.2 ms: subtracting the inflated 25 ms would leave nothing to compare; the cap (16.25 ms)
    # leaves 2.75 ms, and the lie is called out
    entry, _ = _long_hold_entry(reported_ms=0.2, judged_ms=2.5 + 3.5, fixed_ms=13.0)
    jt._wall_clock_check(entry, fixed)
    assert entry.problem is not None and entry.problem[0].value == "timing_mismatch"


def test_a_time_that_depends_on_the_draw_is_noted():
    """The sampling kernel on the H200: 583.8 us on the judge's draw, 58.1 on new values."""
    note = _timing_note({"stop": "converged", "median_ms": 0.5838, "new_values_ms": 0.0581})
    assert note.startswith("the time depends on the input values: 0.5838 ms a call on the "
                           "timed draw, 0.0581 ms on new values")
    assert _timing_note({"stop": "converged", "median_ms": 0.0563, "new_values_ms": 0.0603}) \
        is None  # the same kernel on an H100 draw: within 7%
    assert _timing_note({"stop": "converged", "median_ms": 0.001, "new_values_ms": 0.004}) \
        is None  # under the floor: launch noise, not the draw
    assert _timing_note({"stop": "converged", "median_ms": 0.05, "new_values_ms": None}) is None
