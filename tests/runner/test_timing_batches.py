"""The repetition loops of runner/executor/timing.py, run on the CPU.

`gpu_batch` only runs where CUDA exists, so a slip in its loop (a name reused for the launch count
and for the in-place restore hook broke every GPU timing with more than one repetition, seen on
the H200 2026-12-04) would reach the GPU machine first. Here its device calls (events, the clock
hold, synchronize) are replaced by host stand-ins that count what the loop asked for, and the
loop itself runs: every repetition restores, flushes, launches and is counted."""

from __future__ import annotations

import itertools

import pytest
from atrex.runner.contract import protocol
from atrex.runner.executor import timing


class _HostEvent:
    clock = itertools.count()

    def __init__(self, enable_timing: bool = False):
        self.at = None


@pytest.fixture
def host_device(monkeypatch):
    """`holds` lists the cycles of every hold asked for; the device is taken to have reached the
    timed region before the host finished enqueueing it while the hold is under `waits_below`."""
    calls = {"hold": 0, "holds": [], "waits_below": 0}

    def sleep(cycles):
        calls["hold"] += 1
        calls["holds"].append(cycles)

    monkeypatch.setattr(timing, "_Event", _HostEvent)
    monkeypatch.setattr(timing, "_record", lambda e: setattr(e, "at", next(_HostEvent.clock)))
    monkeypatch.setattr(timing, "_elapsed", lambda a, b: float(b.at - a.at))
    monkeypatch.setattr(timing, "_query", lambda e: calls["holds"][-1] < calls["waits_below"])
    monkeypatch.setattr(timing, "_synchronize", lambda: None)
    monkeypatch.setattr(timing, "_sleep", sleep)
    return calls


def _counting_launches():
    launched = {"n": 0}

    def fn():
        launched["n"] += 2  # two own launches per call

    return fn, lambda: launched["n"]


@pytest.mark.parametrize("reps", [1, 5])
def test_gpu_batch_restores_flushes_and_counts_every_repetition(host_device, reps):
    fn, launches = _counting_launches()
    restored, flushed, kept = [], [], []
    batch = timing.gpu_batch(fn, lambda: flushed.append(1), reps, launches,
                             keep=lambda: kept.append(1), before=lambda: restored.append(1))
    assert len(restored) == len(flushed) == len(kept) == host_device["hold"] == reps
    assert batch.own_launches == [2] * reps
    assert batch.times_ms == [1.0] * reps  # the two events of each repetition, one tick apart
    assert batch.untimed_ms >= 0.0


def test_gpu_batch_without_restore_and_the_quick_estimate(host_device):
    fn, launches = _counting_launches()
    batch = timing.gpu_batch(fn, lambda: None, 3, launches)
    assert batch.own_launches == [2, 2, 2] and batch.untimed_ms == 0.0
    assert timing.quick_estimate_ms(fn, lambda: None, reps=4, before=lambda: None) == 1.0


def test_cpu_batch_restores_before_every_repetition():
    fn, launches = _counting_launches()
    restored = []
    batch = timing.cpu_batch(fn, 4, launches, before=lambda: restored.append(1))
    assert len(restored) == 4 and batch.own_launches == [2, 2, 2, 2]
    assert len(batch.times_ms) == 4


_TORCH_HINT = ("\nSearch for `cudaErrorStreamCaptureInvalidated' in https://docs.nvidia.com/cuda/"
               "cuda-runtime-api/group__CUDART__TYPES.html for more information.\nCUDA kernel "
               "errors might be asynchronously reported at some other API call, so the stacktrace "
               "below might be incorrect.\nFor debugging consider passing "
               "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
               "assertions.\n")


def test_a_failed_capture_is_not_mistaken_for_a_broken_context():
    """The messages as torch 2.11 raised them on the H200 (2026-12-04): a host sync inside the
    capture is a capture failure (fall back to event timing); a device-side assert is not."""
    invalidated = RuntimeError("CUDA error: operation failed due to a previous error during "
                               "capture" + _TORCH_HINT)
    assert not timing.breaks_context(invalidated)
    assert timing.breaks_context(RuntimeError("CUDA error: device-side assert triggered"
                                              + _TORCH_HINT))
    assert timing.breaks_context(RuntimeError("CUDA error: an illegal memory access was "
                                              "encountered" + _TORCH_HINT))


def test_gpu_batch_holds_as_asked_and_says_when_the_device_waited(host_device):
    fn, launches = _counting_launches()
    host_device["waits_below"] = protocol.HOLD_LADDER[1]
    short = timing.gpu_batch(fn, lambda: None, 3, launches)
    assert host_device["holds"] == [protocol.HOLD_CYCLES] * 3
    assert short.device_waited == [True] * 3 and len(short.enqueue_ms) == 3
    long = timing.gpu_batch(fn, lambda: None, 2, launches, hold_cycles=protocol.HOLD_LADDER[1])
    assert host_device["holds"][-2:] == [protocol.HOLD_LADDER[1]] * 2
    assert long.device_waited == [False, False]
    assert all(t >= 0 for t in long.enqueue_ms)


def test_held_batch_takes_the_shortest_hold_the_host_keeps_up_with(host_device):
    fn, _ = _counting_launches()
    host_device["waits_below"] = protocol.HOLD_LADDER[2]
    batch, hold = timing.held_batch(fn, lambda: None, 4)
    assert hold == protocol.HOLD_LADDER[2] and not any(batch.device_waited)
    assert host_device["holds"] == [h for h in protocol.HOLD_LADDER for _ in range(4)]
    host_device["waits_below"] = 10 * protocol.HOLD_LADDER[-1]  # the call waits on the host
    batch, hold = timing.held_batch(fn, lambda: None, 2)
    assert hold == protocol.HOLD_LADDER[-1] and all(batch.device_waited)
