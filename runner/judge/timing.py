"""Timing the passing contestants of one shape, interleaved, driven by the judge.

Each contestant's executor holds its own buffers and runs repetitions of the structure in
`runner.contract.protocol` (flush, hold, events, synchronize) on request; the judge asks for small
batches in turn, A B A B, until every mean is known to the policy's relative standard error. A
launch-bound shape is timed as one CUDA-graph replay of several calls on input copies. After
timing, new values go into the same buffers and the output must be right again (the recheck). The
judge also times each batch on its own clock: a contestant whose reported time is far below what
the judge's wall clock allows (after subtracting the repetition's fixed cost, measured by the judge
itself) is `suspicious`, so a patched clock inside the executor cannot shrink a number unnoticed.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass

import torch

from ..contract import protocol as p
from ..model import FindingKind
from ..scoring import LAUNCH_BOUND_EAGER_MS, LAUNCH_BOUND_SOL_MS
from .contestant import Contestant, ContestantFailed
from .oracle import JudgeContext, ShapeOracle, new_seed
from .stages import prepare_timing, recheck, repetition_problem
from .verdict import StageFailure

# A launch-bound shape is timed as one CUDA-graph replay of several calls, each on its own copy of
# the inputs, all cold after the flush. A replay of a single call counted about 4 us of graph
# launch per sample on the H200 (rmsnorm decode-64 read 4.2 us against a 0.2 us floor, and five
# runs spread 13%); spread over GRAPH_CALLS calls it is a fraction of a microsecond per call.
GRAPH_CALLS = 32
# The input copies of all contestants together: at most this, and at most a quarter of the free
# device memory. A decode KV-cache append carries its whole 256 MiB page pool as an input, so a
# smaller budget would leave it two calls per graph.
GRAPH_COPIES_MAX_BYTES = 16 << 30
# Reported below this fraction of the judge's own estimate, and by more than the slack, is not
# noise: the executor's clock says far less time passed than the judge saw pass. The judge's
# estimate runs high on large eagerly timed shapes: on the H200 (2026-12-03) honest kernels
# reported 0.24-0.33 of it (silu_and_mul 8192x14336: 0.167 ms reported, 0.69 ms judged) and
# 0.5-0.9 on graph-timed ones, so only a clock that shows under a tenth of it is called out.
WALL_CLOCK_FRACTION = 0.1
WALL_CLOCK_SLACK_MS = 0.5


@dataclass(frozen=True)
class TimingPolicy:
    rse_target: float = 0.01
    min_reps: int = 20
    max_reps: int = 5000
    max_seconds: float = 30.0
    batch: int = 10


def graph_calls(input_bytes: int, contestants: int, free_bytes: int) -> int:
    """How many calls (each on its own input copy) one graph replay should hold."""
    budget = min(GRAPH_COPIES_MAX_BYTES, free_bytes // 4) // max(contestants, 1)
    fitting = budget // max(input_bytes, 1)
    return max(1, min(GRAPH_CALLS, fitting))


@dataclass
class _Timed:
    contestant: Contestant
    method: str = "cuda_events"
    calls: int = 1
    estimate_ms: float = math.inf
    free_bytes: int = 0
    samples: list | None = None
    wall_ms: float = 0.0  # the judge's clock over all batches
    batches: int = 0
    ping_ms: float = 0.0  # one empty request's round trip, subtracted per batch
    reps: int = 0
    judged_ms: float | None = None  # the judge's own estimate per sample
    error: str | None = None
    problem: tuple[FindingKind, str] | None = None  # a reason to call the numbers suspicious


def time_shape(ctx: JudgeContext, oracle: ShapeOracle, contestants: dict[str, Contestant],
               policy: TimingPolicy) -> dict[str, dict]:
    drawn = oracle.draw(new_seed())  # one draw for all: data-dependent work is the same
    timed = {label: _Timed(c, samples=[]) for label, c in contestants.items()}
    for entry in timed.values():
        _guard(entry, lambda e=entry: _prepare(oracle, e, drawn, policy.batch))
    live = [e for e in timed.values() if e.error is None]
    launch_bound = bool(live) and (oracle.reference_sol_ms < LAUNCH_BOUND_SOL_MS or min(
        e.estimate_ms for e in live) < LAUNCH_BOUND_EAGER_MS)
    if launch_bound:
        calls = graph_calls(_tensor_bytes(drawn), len(live), min(e.free_bytes for e in live))
        for entry in live:
            _guard(entry, lambda e=entry: _graph(e, calls))
    fixed_ms = _fixed_rep_ms(oracle.device)
    for entry in timed.values():
        _guard(entry, lambda e=entry: _ping(e))
    _measure(timed, policy, lambda e: _check_one_repetition(ctx, oracle, e, drawn, policy))
    for entry in timed.values():
        if entry.error is None:
            _guard(entry, lambda e=entry: _recheck(ctx, oracle, e))
            _wall_clock_check(entry, fixed_ms)
    return {label: _payload(entry, launch_bound) for label, entry in timed.items()}


def _guard(entry: _Timed, step) -> None:
    if entry.error is not None:
        return
    try:
        step()
    except (ContestantFailed, StageFailure) as failure:
        entry.error = failure.message


def _prepare(oracle: ShapeOracle, entry: _Timed, drawn: dict, batch: int) -> None:
    header = prepare_timing(oracle, entry.contestant, drawn, batch)
    entry.estimate_ms = float(header.get("estimate_ms") or math.inf)
    entry.free_bytes = int(header.get("free_bytes") or 0)


def _graph(entry: _Timed, calls: int) -> None:
    header, _ = entry.contestant.request(p.TIME_GRAPH, calls=calls)
    entry.method = str(header.get("method", "cuda_events"))
    entry.calls = int(header.get("calls", 1))


def _measure(timed: dict[str, _Timed], policy: TimingPolicy, check) -> None:
    """Batches in turn until converged; after one batch per contestant, picked at random among
    the first few, `check` looks at one of its repetitions' outputs."""
    start = time.perf_counter()
    rng = random.SystemRandom()
    checked_at = {label: rng.randrange(max(1, policy.min_reps // policy.batch))
                  for label in timed}
    round_ = 0
    while True:
        live = [e for e in timed.values() if e.error is None]
        if not live:
            return
        for label, entry in timed.items():
            _guard(entry, lambda e=entry: _batch(e, policy.batch))
            if checked_at[label] == round_:
                _guard(entry, lambda e=entry: check(e))
        round_ += 1
        live = [e for e in live if e.error is None]
        reps = min((len(e.samples) for e in live), default=0)
        converged = reps >= policy.min_reps and all(_rse(e.samples) <= policy.rse_target
                                                    for e in live)
        if not live or converged or reps >= policy.max_reps or \
                time.perf_counter() - start > policy.max_seconds:
            return


def _ping(entry: _Timed, count: int = 5) -> None:
    """What a request costs with no repetition in it (the channel, the executor's loop)."""
    samples = []
    for _ in range(count):
        begin = time.perf_counter()
        entry.contestant.request(p.TIME_BATCH, reps=0)
        samples.append((time.perf_counter() - begin) * 1e3)
    entry.ping_ms = statistics.median(samples)


def _batch(entry: _Timed, reps: int) -> None:
    begin = time.perf_counter()
    header, _ = entry.contestant.request(p.TIME_BATCH, reps=reps)
    entry.wall_ms += (time.perf_counter() - begin) * 1e3
    entry.batches += 1
    batch = p.from_wire(p.TimingBatch, header.get("batch", {}))
    if len(batch.times_ms) != reps or not all(math.isfinite(t) and t > 0
                                              for t in batch.times_ms):
        entry.error = (f"the executor reported {len(batch.times_ms)} times for {reps} "
                       "repetitions, or times that are not positive")
        return
    if entry.method == "cuda_events" and any(count == 0 for count in batch.own_launches) and \
            entry.contestant.spec.role != "baseline":
        entry.problem = (FindingKind.OUTPUT_CACHE, "timed repetitions on the same inputs "
                         "launched no own kernel: the result came from a cache")
    entry.reps += reps
    entry.samples.extend(t / entry.calls for t in batch.times_ms)


def _check_one_repetition(ctx: JudgeContext, oracle: ShapeOracle, entry: _Timed, drawn: dict,
                          policy: TimingPolicy) -> None:
    rep = random.SystemRandom().randrange(policy.batch)
    problem = repetition_problem(ctx, oracle, entry.contestant, drawn, rep)
    if problem and entry.problem is None:
        entry.problem = (FindingKind.RECHECK_FAILED, problem)


def _recheck(ctx: JudgeContext, oracle: ShapeOracle, entry: _Timed) -> None:
    problem = recheck(ctx, oracle, entry.contestant)
    if problem:
        entry.problem = (FindingKind.RECHECK_FAILED, "after timing, new values in the same "
                         f"inputs gave a wrong output: {problem}")


def _fixed_rep_ms(device: torch.device, reps: int = 30) -> float:
    """What one repetition costs the judge's clock with nothing timed in it (flush, hold, two
    events, a synchronize), measured here, in the judge."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
    buffer = torch.ones(max(4 * l2, p.FLUSH_MIN_BYTES), dtype=torch.int8, device=device)
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        begin = time.perf_counter()
        buffer.max()
        torch.cuda._sleep(p.HOLD_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        end.record()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - begin) * 1e3)
    del buffer
    return statistics.median(samples)


def judged_sample_ms(entry: _Timed, fixed_ms: float) -> float | None:
    """Per sample by the judge's clock: the batches' wall time less one empty request's round
    trip per batch, per repetition, less a repetition's fixed cost."""
    if not entry.reps:
        return None
    return (entry.wall_ms - entry.batches * entry.ping_ms) / entry.reps - fixed_ms


def _wall_clock_check(entry: _Timed, fixed_ms: float) -> None:
    judged = judged_sample_ms(entry, fixed_ms)
    entry.judged_ms = judged
    if not entry.samples or judged is None:
        return
    reported = statistics.median(entry.samples) * entry.calls
    if judged - reported > WALL_CLOCK_SLACK_MS and reported < WALL_CLOCK_FRACTION * judged:
        entry.problem = (FindingKind.TIMING_MISMATCH,
                         f"the executor reported {reported:.4g} ms per sample, but the judge's "
                         f"clock saw {judged:.4g} ms per sample beyond the repetition's fixed "
                         "cost: the executor's clock was tampered with")


def _payload(entry: _Timed, launch_bound: bool) -> dict:
    if entry.error is not None or not entry.samples:
        return {"error": entry.error or "no timing samples"}
    samples = entry.samples
    return {"median_ms": statistics.median(samples), "mean_ms": statistics.fmean(samples),
            "rse": _rse(samples), "reps": len(samples), "method": entry.method,
            "calls_per_sample": entry.calls, "launch_bound": launch_bound,
            "problem": {"kind": entry.problem[0].value, "message": entry.problem[1]}
            if entry.problem else None,
            "judge_ms": entry.judged_ms / entry.calls if entry.judged_ms is not None else None}


def _tensor_bytes(inputs: dict) -> int:
    return sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))


def _rse(values: list[float]) -> float:
    if len(values) < 2:
        return math.inf
    mean = statistics.fmean(values)
    if mean <= 0:
        return math.inf
    return statistics.stdev(values) / math.sqrt(len(values)) / mean
