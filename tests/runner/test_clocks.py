"""The card's clocks while a shape is timed: nvidia-smi sampled in its own process (a fake one on
PATH here, the real one on a GPU machine), the summary in the shape's result, the report's timing
column and the bench's Markdown."""

from __future__ import annotations

import time

import pytest
from atrex.runner import bench, render
from atrex.runner.evaluate import _apply_clocks
from atrex.runner.judge.clocks import ClockSampler, parse_samples
from atrex.runner.model import ShapeResult, Status

IDLE = "Not Active, Not Active, Not Active, Not Active, Not Active"
CAPPED = "Active, Not Active, Not Active, Not Active, Not Active"

# loops like `nvidia-smi -lms`, ends on SIGINT as the real one does, and says how it was asked
LOOPING_SMI = f"""#!/bin/bash
echo "$@" > "$(dirname "$0")/asked"
trap 'exit 0' INT
n=0
while true; do
  if [ $n -lt 3 ]; then echo "1980, 312.40, 41, {IDLE}"; else echo "1755, 699.90, 63, {CAPPED}"; fi
  n=$((n + 1))
  sleep 0.02
done
"""


def _smi(tmp_path, monkeypatch, script: str):
    smi = tmp_path / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")


def test_samples_are_summarized_and_lines_that_are_not_samples_skipped():
    text = "\n".join([f"1980, 312.40, 41, {IDLE}", f"1755, [N/A], 63, {CAPPED}",
                      "Unable to determine the device handle", "1830, 650.00, 5"])
    got = parse_samples(text)
    assert got.samples == 2
    assert (got.sm_clock_median_mhz, got.sm_clock_min_mhz, got.sm_clock_max_mhz) == \
        (1867.5, 1755, 1980)
    assert got.power_max_w == 312.4 and got.temperature_max_c == 63
    assert got.slowdowns == ("power cap",)
    assert parse_samples("No devices were found\n") is None


def test_the_sampler_asks_about_the_card_and_summarizes_what_ran_beside_the_timing(
        tmp_path, monkeypatch):
    _smi(tmp_path, monkeypatch, LOOPING_SMI)
    with ClockSampler("GPU-1ea945f7-e16c-db2f-fb53-4a5413b2c9d7", interval_ms=20) as clocks:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (tmp_path / "asked").exists():
            time.sleep(0.01)
        time.sleep(0.3)  # the timed batches
    asked = (tmp_path / "asked").read_text()
    assert "--id=GPU-1ea945f7-e16c-db2f-fb53-4a5413b2c9d7" in asked and "-lms=20" in asked
    summary = clocks.summary
    assert summary is not None and summary.samples >= 4
    assert summary.sm_clock_max_mhz == 1980 and summary.sm_clock_min_mhz == 1755
    assert summary.slowdowns == ("power cap",)


def test_a_sampler_that_does_not_stop_is_killed(tmp_path, monkeypatch):
    _smi(tmp_path, monkeypatch, f"#!/bin/bash\ntrap '' INT\necho '1980, 300, 40, {IDLE}'\n"
         "while true; do sleep 0.05; done\n")
    start = time.monotonic()
    with ClockSampler("0", interval_ms=20, stop_timeout_s=0.5) as clocks:
        time.sleep(0.2)
    assert time.monotonic() - start < 5
    assert clocks.summary is not None and clocks.summary.samples == 1


def test_a_long_timing_keeps_every_sample(tmp_path, monkeypatch):
    """More samples than a pipe holds (64 KB: ~80 s at 100 ms) are kept, none waiting to be
    read: the sampler writes to a file."""
    _smi(tmp_path, monkeypatch, f"#!/bin/bash\ntrap 'exit 0' INT\n"
         f"for i in $(seq 3000); do echo '1980, 300.00, 40, {IDLE}'; done\n"
         f"touch \"$(dirname \"$0\")/done\"\nwhile true; do sleep 0.05; done\n")
    with ClockSampler("0") as clocks:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (tmp_path / "done").exists():
            time.sleep(0.05)
        assert (tmp_path / "done").exists()  # it never waited for its output to be read
    assert clocks.summary is not None and clocks.summary.samples == 3000


def test_without_nvidia_smi_or_a_card_nothing_is_made_up(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with ClockSampler("0") as clocks:
        pass
    assert clocks.summary is None
    _smi(tmp_path, monkeypatch, LOOPING_SMI)
    with ClockSampler(None) as clocks:
        pass
    assert clocks.summary is None and not (tmp_path / "asked").exists()


def _timed_shape(slowdowns: list[str]) -> ShapeResult:
    shape = ShapeResult(id="prefill-t8192", status=Status.PASS, time_ms=1.1,
                        timing_method="cuda_events", timing_reps=40, timing_rse=0.002)
    _apply_clocks(shape, {"samples": 12, "sm_clock_median_mhz": 1755.0, "sm_clock_min_mhz": 1710,
                          "sm_clock_max_mhz": 1980, "power_max_w": 699.9,
                          "temperature_max_c": 63, "slowdowns": slowdowns})
    return shape


def test_the_shape_result_and_the_report_say_what_clock_the_times_ran_at():
    shape = _timed_shape(["power cap"])
    assert shape.timing_sm_clock_mhz == 1755.0 and shape.timing_sm_clock_range_mhz == [1710, 1980]
    assert shape.timing_slowdowns == ["power cap"] and shape.timing_power_max_w == 699.9
    assert render.clock_text(shape) == ", SM 1755 MHz (1710-1980), clock held down: power cap"
    untouched = ShapeResult(id="s", status=Status.PASS)
    _apply_clocks(untouched, None)
    assert untouched.timing_sm_clock_mhz is None and render.clock_text(untouched) == ""


def test_the_bench_markdown_names_the_clock_and_the_shapes_it_was_held_down_for():
    held, free = _timed_shape(["power cap"]), _timed_shape([])
    free.id, free.timing_sm_clock_mhz = "decode-t64", 1980.0
    doc = {"instances": [{"op": "fused_moe", "results": {
        label: {"shapes": {s.id: bench._shape_entry(s, {}) for s in (free, held)}}
        for label in ("library", "kb")}}]}
    entry = doc["instances"][0]["results"]["kb"]["shapes"]["prefill-t8192"]
    assert (entry["timing_power_max_w"], entry["timing_temperature_max_c"]) == (699.9, 63)
    lines = "\n".join(bench._clocks(doc))
    assert "1755-1980 MHz over 2 shapes" in lines
    assert "- `fused_moe` `prefill-t8192`: power cap (SM 1755 MHz)" in lines
    assert "decode-t64`:" not in lines
    assert bench._clocks({"instances": []}) == []


@pytest.mark.gpu
def test_the_real_nvidia_smi_samples_the_card_a_kernel_runs_on():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from atrex.runner.peaks import card_uuid

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    with ClockSampler(card_uuid(0)) as clocks:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            a @ a
        torch.cuda.synchronize()
    assert clocks.summary is not None and clocks.summary.samples >= 3
    assert clocks.summary.sm_clock_max_mhz > 500
