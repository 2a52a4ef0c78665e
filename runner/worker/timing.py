"""GPU timing: CUDA events, L2 flushed before every repetition, adaptive repetition count.

The clock functions are captured when this module is imported, before any candidate code runs, so a
candidate that patches `torch.cuda.Event.elapsed_time` or `time.perf_counter` cannot change what we
measure (the identity guard reports the patch separately).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..scoring import LAUNCH_BOUND_EAGER_MS, LAUNCH_BOUND_SOL_MS  # noqa: F401 - re-exported

_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize
_perf_counter = time.perf_counter


@dataclass
class Timing:
    median_ms: float
    mean_ms: float
    rse: float  # relative standard error of the mean
    reps: int
    method: str  # "cuda_events" or "cuda_graph"
    calls_per_sample: int  # operator calls inside one timed sample; the times above are per call


@dataclass(frozen=True)
class Timed:
    """What one contestant's timed sample runs: `fn` performs `calls` operator calls."""

    fn: Callable[[], object]
    method: str  # "cuda_events" or "cuda_graph"
    calls: int = 1


@dataclass(frozen=True)
class TimingPolicy:
    rse_target: float = 0.01
    min_reps: int = 20
    max_reps: int = 5000
    max_seconds: float = 30.0
    batch: int = 10


class L2Flusher:
    """Reads a buffer larger than the L2 cache, so every repetition starts cold.

    A read, not a write: zeroing the buffer would leave L2 full of dirty lines whose write-back
    the timed kernel would then pay for (on the H200, 2026-12-03, a write flush made a 31 us
    RMSNorm read about 37 us against ncu's gpu__time_duration with its own cache control)."""

    def __init__(self, device: torch.device):
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
        self.buffer = torch.ones(max(4 * l2, 256 << 20), dtype=torch.int8, device=device)

    def __call__(self) -> None:
        self.buffer.max()


# A launch-bound shape is timed as one CUDA-graph replay of several calls, each on its own copy of
# the inputs, all cold after the flush. A replay of a single call counted about 4 us of graph
# launch per sample on the H200 (rmsnorm decode-64 read 4.2 us against a 0.2 us floor, and five
# runs spread 13%). Spread over GRAPH_CALLS calls it should shrink to a fraction of a microsecond
# per call (expected, not yet measured on a GPU).
GRAPH_CALLS = 32
# The input copies of all contestants together: at most this, and at most a quarter of the free
# device memory. A decode KV-cache append carries its whole 256 MiB page pool as an input, so a
# smaller budget would leave it two calls per graph.
GRAPH_COPIES_MAX_BYTES = 16 << 30


def graph_calls(input_bytes: int, contestants: int, free_bytes: int) -> int:
    """How many calls (each on its own input copy) one graph replay should hold."""
    budget = min(GRAPH_COPIES_MAX_BYTES, free_bytes // 4) // max(contestants, 1)
    fitting = budget // max(input_bytes, 1)
    return max(1, min(GRAPH_CALLS, fitting))


def try_graph(calls: Sequence[Callable[[], object]]) -> Callable[[], object] | None:
    """A replay of `calls` (in order) captured in one CUDA graph, or None when they cannot be."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # lazy initialisation (workspaces, autotuning) stays out of capture
                for fn in calls:
                    fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for fn in calls:
                fn()
        _synchronize()
        return graph.replay
    except Exception:
        _synchronize()
        return None


def quick_estimate_ms(fn: Callable[[], object], flush: L2Flusher, reps: int = 5) -> float:
    samples = _run_round_robin({"x": fn}, flush, reps)["x"]
    return statistics.median(samples)


def warm_up(fn: Callable[[], object], calls: int = 3) -> None:
    for _ in range(calls):
        fn()
    _synchronize()


def measure_interleaved(timed: dict[str, Timed], flush: L2Flusher,
                        policy: TimingPolicy = TimingPolicy()) -> dict[str, Timing]:
    """Times several contestants A B A B ... until each mean is known to `rse_target`."""
    fns = {label: t.fn for label, t in timed.items()}
    samples: dict[str, list[float]] = {label: [] for label in timed}
    start = _now()
    while True:
        batch = _run_round_robin(fns, flush, policy.batch)
        for label, values in batch.items():
            samples[label].extend(v / timed[label].calls for v in values)
        reps = len(next(iter(samples.values())))
        converged = reps >= policy.min_reps and all(
            _rse(v) <= policy.rse_target for v in samples.values())
        if converged or reps >= policy.max_reps or _now() - start > policy.max_seconds:
            break
    return {label: Timing(median_ms=statistics.median(v), mean_ms=statistics.fmean(v),
                          rse=_rse(v), reps=len(v), method=timed[label].method,
                          calls_per_sample=timed[label].calls)
            for label, v in samples.items()}


# GPU cycles of busy-wait queued after the flush: the device stays busy while the host enqueues
# the timed launch, so host-side launch latency is not counted as device time. Measured on the
# H200 (2026-12-03): without it, a 31 us RMSNorm (ncu gpu__time_duration) read 75 us.
_HOLD_CYCLES = 400_000


def _run_round_robin(fns, flush: L2Flusher, rounds: int) -> dict[str, list[float]]:
    pending: dict[str, list[tuple[torch.cuda.Event, torch.cuda.Event]]] = {k: [] for k in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            flush()
            torch.cuda._sleep(_HOLD_CYCLES)
            begin, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(begin)
            fn()
            _record(end)
            # Each repetition ends the device's work before the next starts, so one candidate's
            # stray work (say, on a side stream) cannot land inside another candidate's timing.
            _synchronize()
            pending[label].append((begin, end))
    return {label: [_elapsed(b, e) for b, e in pairs] for label, pairs in pending.items()}


def _rse(values: list[float]) -> float:
    if len(values) < 2:
        return math.inf
    mean = statistics.fmean(values)
    if mean <= 0:
        return math.inf
    return statistics.stdev(values) / math.sqrt(len(values)) / mean


def _now() -> float:
    return _perf_counter()
