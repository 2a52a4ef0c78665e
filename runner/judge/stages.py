"""Judging one contestant on one shape, in stages that stop at the first failure.

1. calls: a random number of calls (at least `trials` fresh draws, one refill of the same tensors
   with new values, one exact repeat unless the op mutates its inputs), in random order after the
   first; every call is judged the same way: the executor's guard flags, the structure of the
   output, the inputs left alone, the values against the high-precision reference, no output
   storage handed out twice, and on a repeat fresh work.
2. attribution (`attribution.py`): own kernels ran, wrote the outputs, read the inputs, did the
   work (dispatch share, host CPU time, device time on a GPU), no processes started.
3. replays: ghost (own kernels as no-ops) and taint (own kernels see other values) must both break
   the output.
4. on a CPU machine, a short timing-like loop on one set of buffers and a recheck with new values
   (on a GPU the real timing does this, see timing.py).
Each stage raises `StageFailure`; `judge` turns it into the shape's verdict.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch

from ..contract import protocol as p
from ..contract import wire
from ..model import FindingKind, Status
from . import attribution
from .compare import (
    Comparison,
    StructureError,
    check_structure,
    check_tensor,
    flatten_output,
)
from .contestant import Contestant, ContestantFailed, Opaque, place_tensor
from .oracle import JudgeContext, ShapeOracle, clone_inputs, new_seed
from .verdict import StageFailure, Verdict

# On a CPU machine the calls of a graph replay run as a plain sequence of this many calls (each on
# its own input copies, as on a GPU), within this budget of copies.
CPU_SEQUENCE_CALLS = 2
CPU_COPY_BUDGET_BYTES = 1 << 30
OUTPUT_CALLS_CHECKED = 4  # of a timed replay's calls, after a batch

# What an executor-side guard flag means for the verdict.
_FLAG_KINDS = {
    "patched_function": FindingKind.PATCHED_FUNCTION,
    "side_thread": FindingKind.SIDE_THREAD,
    "lazy_output": FindingKind.LAZY_OUTPUT,
    "mode_active": FindingKind.EVALUATOR_TAMPERED,
    "evaluator_tampered": FindingKind.EVALUATOR_TAMPERED,
    "child_process": FindingKind.CHILD_PROCESS,
}


@dataclass
class Observed:
    """One judged call, as the judge saw it."""

    reuse: str
    seed: int
    inputs: dict  # the judge's copy of what the executor was given
    report: p.CallReport
    raw: object = None  # the output as it arrived
    mutated: dict = field(default_factory=dict)  # declared in-place inputs after the call
    outputs: dict = field(default_factory=dict)  # flat, with "input:<name>", once checked
    comparison: Comparison | None = None


def judge(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant) -> Verdict:
    try:
        _build(oracle, contestant)
        if contestant.spec.role == "baseline":
            return _baseline(ctx, oracle, contestant)
        calls = run_calls(ctx, oracle, contestant, call_plan(ctx.trials, bool(oracle.mutates)))
        profile = _profiled_call(ctx, oracle, contestant) if ctx.device_type == "cuda" else None
        share = attribution.own_share(ctx, oracle, contestant, calls, profile)
        _replays(ctx, oracle, contestant, calls)
        if ctx.device_type == "cpu":
            _timing_like_loop(ctx, oracle, contestant)
        contestant.settle()
    except StageFailure as failure:
        return Verdict.failed(failure)
    except ContestantFailed as failure:
        return Verdict.failed(StageFailure(failure.status, failure.kind, failure.message))
    except wire.ProtocolError as exc:  # a record that does not parse
        contestant.discard()
        return Verdict.failed(StageFailure(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                                           f"the executor broke the message contract: {exc}"))
    return Verdict(Status.PASS, own_share=share, **_errors(calls))


def _baseline(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant) -> Verdict:
    """The reference itself (eager or compiled), for `atrex bench`: correctness only."""
    calls = run_calls(ctx, oracle, contestant, [p.FRESH] * ctx.trials, guarded=False)
    said = sorted({c.report.implementation for c in calls if c.report.implementation})
    return Verdict(Status.PASS, implementation="; ".join(said) or None, **_errors(calls))


_ERROR_FIELDS = ("max_abs_error", "max_rel_error", "rel_l2_error", "reference_max_abs_error",
                 "reference_rel_l2_error")


def _errors(calls: list[Observed]) -> dict[str, float | None]:
    """The worst of each error over the judged calls (None where no call measured it)."""
    result = {}
    for name in _ERROR_FIELDS:
        values = [getattr(c.comparison, name) for c in calls if c.comparison]
        values = [v for v in values if v is not None]
        result[name] = max(values) if values else None
    return result


def call_plan(trials: int, mutates: bool, rng: random.Random | None = None) -> list[str]:
    """How the calls of one shape give their inputs: the first is fresh; the rest, shuffled, are
    the remaining fresh draws plus up to one more, one refill and (unless the op updates its
    inputs in place, so a repeat would start from other values) one exact repeat."""
    rng = rng or random.SystemRandom()
    rest = [p.FRESH] * (max(trials, 1) - 1 + rng.randint(0, 1)) + [p.REFILL]
    if not mutates:
        rest.append(p.REPEAT)
    rng.shuffle(rest)
    return [p.FRESH, *rest]


def _build(oracle: ShapeOracle, contestant: Contestant) -> None:
    blobs: list = []
    state = wire.encode_value(oracle.state(), blobs)
    header, _ = contestant.request(p.BUILD, blobs, init_kwargs=oracle.shape.init_kwargs,
                                   state=state)
    _raise_if_raised(header)


def run_calls(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant,
              plan: list[str], guarded: bool = True) -> list[Observed]:
    calls: list[Observed] = []
    for index, reuse in enumerate(plan):
        observed, _ = one_call(oracle, contestant, reuse, calls[-1] if calls else None)
        judge_call(ctx, oracle, contestant, observed, calls, index, guarded)
        calls.append(observed)
    return calls


def one_call(oracle: ShapeOracle, contestant: Contestant, reuse: str,
             previous: Observed | None, replay: str = p.NORMAL,
             command: str = p.CALL, same_values: bool = False) -> tuple[Observed, dict]:
    """One request whose answer is a call (CALL, or PROFILE with the profile in the header).
    A REFILL with `same_values` copies `previous`'s inputs back into its buffers."""
    if reuse == p.REPEAT:
        seed, inputs, fields, blobs = previous.seed, previous.inputs, {}, []
    else:
        seed = previous.seed if same_values else new_seed()
        inputs = previous.inputs if same_values else oracle.draw(seed)
        blobs = []
        fields = {"inputs": wire.encode_inputs(inputs, blobs)}
    header, data = contestant.request(command, blobs, reuse=reuse, replay=replay, **fields)
    if header.get("raised"):  # the request itself failed (say, a CUDA error after the forward)
        report = p.CallReport(raised=p.from_wire(p.Raised, header["raised"]))
    else:
        report = p.from_wire(p.CallReport, header.get("report", {}))
    if report.raised is not None and report.raised.cuda_broken:
        contestant.discard()  # its CUDA context is gone: a fresh executor for the next shape
    observed = Observed(reuse=reuse, seed=seed, inputs=clone_inputs(inputs), report=report)
    if report.raised is None:
        observed.raw, observed.mutated = received_outputs(header, data, oracle.ctx.device_type)
    return observed, header


def received_outputs(header: dict, data: list, device: str) -> tuple[object, dict]:
    """The output and the in-place updated inputs, rebuilt from the executor's data."""
    place = place_tensor(device)
    try:
        out = wire.decode_value(header.get("outputs"), data, Opaque, place)
        mutated = wire.decode_value(header.get("mutated", {"dict": []}), data, Opaque, place)
    except wire.ProtocolError as exc:
        raise ContestantFailed(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                               f"the outputs broke the message contract: {exc}") from None
    if not isinstance(mutated, dict):
        raise ContestantFailed(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                               "the in-place inputs did not arrive as a mapping")
    return out, mutated


def judge_call(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant,
               observed: Observed, earlier: list[Observed], index: int, guarded: bool) -> None:
    report = observed.report
    where = f"call {index + 1}, {observed.reuse} inputs, seed {observed.seed}"
    if report.raised is not None:
        raise raised_failure(report.raised)
    if guarded:
        _check_flags(report)
    flat = _check_shape_of(observed, oracle)
    if guarded:
        _check_inputs_untouched(oracle, report, where)
    comparison = oracle.compare(flat, observed.inputs)
    observed.comparison = comparison
    launched_before = any(_launched(c) for c in earlier)
    if not comparison.ok:
        raise _wrong(ctx, oracle, contestant, observed, comparison, where, launched_before)
    if guarded:
        _check_fresh_storage(report, where)
        if observed.reuse == p.REPEAT and launched_before and not _launched(observed):
            raise _cached(ctx, oracle, contestant, where)


def flag_kind(name: str) -> FindingKind:
    return _FLAG_KINDS.get(name, FindingKind.EVALUATOR_TAMPERED)


def _check_flags(report: p.CallReport) -> None:
    for flag in report.flags:
        raise StageFailure(Status.SUSPICIOUS, flag_kind(flag.kind), flag.message[:600])


def _check_shape_of(observed: Observed, oracle: ShapeOracle) -> dict[str, torch.Tensor]:
    raw = observed.raw
    opaque = {k: v.description for k, v in flatten_output(raw).items() if isinstance(v, Opaque)}
    opaque.update({f"input:{k}": v.description for k, v in observed.mutated.items()
                   if isinstance(v, Opaque)})
    if opaque:
        listed = ", ".join(f"{k} ({v})" for k, v in list(opaque.items())[:4])
        raise StageFailure(Status.SUSPICIOUS, FindingKind.TENSOR_SUBCLASS,
                           f"outputs are not plain tensors: {listed}")
    try:
        flat = check_structure(raw, oracle.expected)
    except StructureError as exc:
        raise StageFailure(Status.INCORRECT, FindingKind.STRUCTURE, str(exc)) from None
    for name in oracle.mutates:
        if name not in observed.mutated:
            raise ContestantFailed(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                                   f"the in-place input {name!r} did not come back")
        key = f"input:{name}"
        try:
            check_tensor(key, observed.mutated[name], oracle.expected[key])
        except StructureError as exc:
            raise StageFailure(Status.INCORRECT, FindingKind.STRUCTURE, str(exc)) from None
        flat[key] = observed.mutated[name]
    observed.outputs = flat
    return flat


def _check_inputs_untouched(oracle: ShapeOracle, report: p.CallReport, where: str) -> None:
    touched = [k for k in report.touched_inputs if k not in oracle.mutates]
    if touched:
        raise StageFailure(Status.INCORRECT, FindingKind.INPUT_MUTATION,
                           f"forward modified its inputs {touched} ({where}); declare them in "
                           "metadata.json 'mutates' if the operator updates them in place")


def _wrong(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant, observed: Observed,
           comparison: Comparison, where: str, launched_before: bool) -> StageFailure:
    """A wrong output. When the same tensors came back (refill or repeat), one more call on
    fresh tensors tells a kernel that is simply wrong from one that caches by buffer."""
    if launched_before and not _launched(observed):
        return _cache_hit(where, comparison.problem)
    if observed.reuse != p.FRESH:
        fresh, _ = one_call(oracle, contestant, p.FRESH, None)
        if fresh.report.raised is None and _right(ctx, oracle, fresh):
            return StageFailure(Status.SUSPICIOUS, FindingKind.OUTPUT_CACHE,
                                "correct on fresh tensors but wrong when the same tensors came "
                                f"back ({where}): the output is cached ({comparison.problem})")
    return StageFailure(Status.INCORRECT, comparison.kind or FindingKind.MISMATCH,
                        f"{comparison.problem} ({where})")


def _launched(observed: Observed) -> bool:
    return any(launch.own for launch in observed.report.launches)


def _cache_hit(where: str, problem: str | None) -> StageFailure:
    """A wrong output from a call that launched no own kernel where an earlier call of the same
    shape did: it came from somewhere other than the kernels. Fresh tensors can land where
    freed ones were, so a cache keyed by address hits on them too."""
    return StageFailure(Status.SUSPICIOUS, FindingKind.OUTPUT_CACHE,
                        f"a call launched no own kernel, though an earlier call of this shape "
                        f"did, and its output is wrong ({where}): the output is cached"
                        + (f" ({problem})" if problem else ""))


def _cached(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant,
            where: str) -> StageFailure:
    """A repeat that launched nothing: a cache, unless the kernel ignores its inputs altogether
    (then a fresh call is wrong too, and that is what it is)."""
    fresh, _ = one_call(oracle, contestant, p.FRESH, None)
    if fresh.report.raised is None and not _right(ctx, oracle, fresh):
        comparison = fresh.comparison
        if not _launched(fresh):
            return _cache_hit("a fresh call after a repeat",
                              comparison.problem if comparison else None)
        return StageFailure(Status.INCORRECT, FindingKind.MISMATCH,
                            f"{comparison.problem if comparison else 'wrong output'} "
                            "(a fresh call after a repeat)")
    return StageFailure(Status.SUSPICIOUS, FindingKind.OUTPUT_CACHE,
                        f"a repeated call with the same inputs launched no own kernel ({where}): "
                        "the result came from a cache")


def _right(ctx: JudgeContext, oracle: ShapeOracle, observed: Observed) -> bool:
    try:
        flat = _check_shape_of(observed, oracle)
    except StageFailure:
        return False
    observed.comparison = oracle.compare(flat, observed.inputs)
    return observed.comparison.ok


def _check_fresh_storage(report: p.CallReport, where: str) -> None:
    """An output in a storage the previous call returned (still alive, so the allocator cannot
    have reused it) is the same buffer handed out twice."""
    inputs = set(report.input_storages.values())
    reused = [k for k, ptr in report.output_storages.items()
              if ptr and ptr in report.previous_storages and ptr not in inputs]
    if reused:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.STALE_OUTPUT,
                           f"outputs {reused} are in the buffer an earlier call returned "
                           f"({where}): the result was cached or the buffer reused, not "
                           "computed afresh into a new output")


def raised_failure(raised: p.Raised) -> StageFailure:
    status = Status.COMPILE_ERROR if raised.compile else Status.RUNTIME_ERROR
    kind = FindingKind.COMPILE_ERROR if raised.compile else FindingKind.RUNTIME_ERROR
    if raised.type == "NotTritonError":
        kind = FindingKind.NOT_TRITON
    if raised.type == "LibraryUnavailable":  # a bench library peer this machine cannot run
        kind = FindingKind.UNAVAILABLE
    return StageFailure(status, kind, raised.message, file=raised.file, line=raised.line)


def _raise_if_raised(header: dict) -> None:
    if header.get("raised"):
        raised = p.from_wire(p.Raised, header["raised"])
        raise raised_failure(raised)


def _profiled_call(ctx: JudgeContext, oracle: ShapeOracle,
                   contestant: Contestant) -> p.DeviceProfile:
    """One more judged call, under the device profiler."""
    observed, header = one_call(oracle, contestant, p.FRESH, None, command=p.PROFILE)
    judge_call(ctx, oracle, contestant, observed, [], 0, guarded=True)
    return p.from_wire(p.DeviceProfile, header.get("profile", {}))


# --- replays -------------------------------------------------------------------------------------

def _replays(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant,
             calls: list[Observed]) -> None:
    ghost = _replay(ctx, oracle, contestant, p.GHOST)
    if ghost is not None and ghost.comparison.ok:
        raise StageFailure(Status.FALLBACK, FindingKind.GHOST_REPLAY,
                           "the output still matched the reference with the repository's kernels "
                           f"disabled (seed {ghost.seed}): they did not compute it", own_share=0.0)
    taint = _replay(ctx, oracle, contestant, p.TAINT)
    if taint is None:
        return
    _raise_if_tainted_right(oracle, taint, "")
    _replays_on_the_same_values(ctx, oracle, contestant, taint)
    if not oracle.mutates:
        _mirror(ctx, oracle, contestant)


def _mirror(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant) -> None:
    """The taint replay turned around: everything but the own kernels sees shuffled inputs, so
    the output must still be right. A kernel that tells the taint replay apart (an own kernel
    reads the inputs and the host compares) cannot tell which of the two values is real here."""
    mirror = _replay(ctx, oracle, contestant, p.MIRROR)
    if mirror is not None and mirror.comparison.ok:
        return
    what = ("failed" if mirror is None else
            f"gave a wrong output ({mirror.comparison.problem})")
    raise StageFailure(Status.FALLBACK, FindingKind.MIRROR_REPLAY,
                       f"the call {what} when only the own kernels saw the real inputs and "
                       "everything else saw them shuffled: the output was computed outside the "
                       "own kernels (on the host, in another thread or process, or out of the "
                       "dispatcher's sight)", own_share=0.0)


def _raise_if_tainted_right(oracle: ShapeOracle, taint: Observed, how: str) -> None:
    if not taint.comparison.ok:
        return
    if not set(taint.report.inputs_read) & set(oracle.float_inputs):
        return  # no floating input reaches an own kernel: the replay changes nothing it reads
    raise StageFailure(Status.FALLBACK, FindingKind.TAINT_REPLAY,
                       "the output still matched the reference while the own kernels read "
                       f"other values in place of the inputs (seed {taint.seed}{how}): it was "
                       "computed outside them (on the host, in another thread or process, "
                       "out of the dispatcher's sight, or kept from an earlier call)",
                       own_share=0.0)


def _replays_on_the_same_values(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant,
                                taint: Observed) -> None:
    """The taint replay's inputs again, in the same buffers: a plain call must be right (a
    result kept from the replay, computed from other values, is wrong here), and a second taint
    replay must not be (a result kept from the plain call is right there). A kernel that keeps
    outputs by its inputs' addresses and values shows one or the other: the timed repetitions,
    which repeat one call on the same inputs, would time the lookup, not the work."""
    plain, _ = one_call(oracle, contestant, _same_values_reuse(oracle), taint, p.NORMAL,
                        same_values=True)
    if plain.report.raised is not None:  # a plain call: failing is failing, as anywhere
        raise raised_failure(plain.report.raised)
    if not _right(ctx, oracle, plain):
        problem = plain.comparison.problem if plain.comparison else "a malformed output"
        raise StageFailure(Status.SUSPICIOUS, FindingKind.OUTPUT_CACHE,
                           f"a call on the inputs of the taint replay before it gave a wrong "
                           f"output ({problem}): the output the own kernels computed from other "
                           "values during that replay was kept and returned")
    again = _replay(ctx, oracle, contestant, p.TAINT, same_as=plain)
    if again is not None:
        _raise_if_tainted_right(oracle, again, ", the inputs of the call before it")


def _same_values_reuse(oracle: ShapeOracle) -> str:
    """The same values again in the same buffers: an exact repeat, or for an operator that
    updates inputs in place (a repeat would start from what the call left), a refill."""
    return p.REFILL if oracle.mutates else p.REPEAT


def _replay(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant,
            replay: str, same_as: Observed | None = None) -> Observed | None:
    """A replay's call, on fresh inputs or on `same_as`'s again (an exact repeat, or for an
    operator that updates inputs in place, its values copied back into the same buffers);
    None when it did not produce a comparable output (that is fine)."""
    if same_as is None:
        observed, _ = one_call(oracle, contestant, p.FRESH, None, replay)
    else:
        observed, _ = one_call(oracle, contestant, _same_values_reuse(oracle), same_as, replay,
                               same_values=True)
    if observed.report.raised is not None:
        return None
    try:
        flat = _check_shape_of(observed, oracle)
    except StageFailure:
        return None
    observed.comparison = oracle.compare(flat, observed.inputs)
    return observed


# --- the CPU stand-in for timing ----------------------------------------------------------------

def _timing_like_loop(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant) -> None:
    """What timing does on a GPU, without the clocks: the calls of a graph replay on their input
    copies (run as a plain sequence; in-place inputs restored before every repetition), repeated
    (one repetition's output, picked afterwards, must be right), then new values in the first
    call's buffers and one more replay, whose output must be right too."""
    rng = random.SystemRandom()
    inputs = oracle.draw(new_seed())
    prepare_timing(oracle, contestant, inputs)
    header, _ = contestant.request(p.TIME_GRAPH, calls=CPU_SEQUENCE_CALLS,
                                   budget_bytes=CPU_COPY_BUDGET_BYTES)
    _raise_if_raised(header)
    calls = int(header.get("calls", 1))
    reps = rng.randint(2, 4)
    header, _ = contestant.request(p.TIME_BATCH, reps=reps)
    _raise_if_raised(header)
    batch = p.from_wire(p.TimingBatch, header.get("batch", {}))
    if any(count == 0 for count in batch.own_launches):
        raise StageFailure(Status.SUSPICIOUS, FindingKind.OUTPUT_CACHE,
                           "repeated calls on the same tensors launched no own kernel: the "
                           "result came from a cache")
    problem = repetition_problem(ctx, oracle, contestant, inputs, reps, calls)
    if problem:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.RECHECK_FAILED, problem)
    checked = recheck(ctx, oracle, contestant, inputs, calls)
    if checked.inputs_changed:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.INPUT_MUTATION, checked.problem)
    problem = checked.problem
    if problem:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.RECHECK_FAILED,
                           f"after repeated calls, new values in the same inputs gave a wrong "
                           f"output: {problem}")


def repetition_problem(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant,
                       inputs: dict, reps: int, calls: int = 1) -> str | None:
    """The output of one repetition of the last timed batch (picked now, after it ran), of
    every call a replay holds (the later ones run on copies of the same values), against the
    reference. An operator that updates its inputs in place is restored to the drawn state
    before every repetition, so for it the last repetition is taken, with its in-place inputs
    as that repetition left them (the reference applied to the drawn inputs)."""
    rng = random.SystemRandom()
    rep = reps - 1 if oracle.mutates else rng.randrange(max(reps, 1))
    for call in calls_to_check(calls, rng):
        problem = _one_output_problem(ctx, oracle, contestant, inputs, rep, call)
        if problem:
            which = f" (call {call + 1} of the {calls} a replay holds)" if calls > 1 else ""
            return f"a timed repetition's output is wrong{which}: {problem}"
    return None


def calls_to_check(calls: int, rng: random.Random) -> list[int]:
    """The first call of a replay and up to OUTPUT_CALLS_CHECKED - 1 others, picked at random:
    a kernel that does the work for a few of a graph's calls is caught with near certainty,
    without moving every copy's outputs (in-place caches included) to the judge."""
    later = list(range(1, max(calls, 1)))
    return [0] + sorted(rng.sample(later, min(len(later), OUTPUT_CALLS_CHECKED - 1)))


def _one_output_problem(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant,
                        inputs: dict, rep: int, call: int) -> str | None:
    header, data = contestant.request(p.TIME_OUTPUT, rep=rep, call=call)
    _raise_if_raised(header)
    raw, mutated = received_outputs(header, data, ctx.device_type)
    observed = Observed(p.REPEAT, 0, inputs, p.CallReport(), raw, mutated)
    try:
        flat = _check_shape_of(observed, oracle)
    except StageFailure as failure:
        return failure.message
    result = oracle.compare(flat, inputs)
    return None if result.ok else result.problem


def prepare_timing(oracle: ShapeOracle, contestant: Contestant, inputs: dict, batch: int = 10):
    blobs: list = []
    header, _ = contestant.request(p.TIME_PREPARE, blobs, batch=batch,
                                   inputs=wire.encode_inputs(inputs, blobs))
    _raise_if_raised(header)
    return header


def timed_inputs_changed(names: tuple[str, ...]) -> str:
    return (f"the timed calls changed inputs {list(names)} that the operator does not update "
            "in place (the judged calls left them as they were): later repetitions ran on "
            "other values than the ones drawn")


@dataclass(frozen=True)
class Recheck:
    problem: str | None  # what was wrong with the output, None when it was right
    time_ms: float | None  # the call timed as a repetition (on a GPU), per replay
    device_waited: bool = False  # the device reached the timed region before the host was done
    inputs_changed: tuple[str, ...] = ()  # inputs the timed calls changed, not in `mutates`


def recheck(ctx: JudgeContext, oracle: ShapeOracle, contestant: Contestant, timed: dict,
            calls: int, hold_cycles: int = p.HOLD_CYCLES) -> Recheck:
    """New values in the timed buffers must give the new reference output; the call on them is
    timed as the repetitions were. In a replay of several calls, one later call, picked at
    random, runs on copies of the `timed` values still and must give their output: a call that
    copies the first call's output instead is wrong there."""
    inputs = oracle.draw(new_seed())
    blobs: list = []
    header, data = contestant.request(p.RECHECK, blobs, hold_cycles=hold_cycles,
                                      inputs=wire.encode_inputs(inputs, blobs))
    _raise_if_raised(header)
    batch = p.from_wire(p.TimingBatch, header.get("batch", {}))
    times = batch.times_ms
    time_ms = times[0] if times and math.isfinite(times[0]) and times[0] > 0 else None
    waited = any(batch.device_waited)
    changed = header.get("inputs_changed") or []
    if not isinstance(changed, list):
        raise wire.ProtocolError("inputs_changed is not a list")
    changed = tuple(str(name)[:100] for name in changed[:50])
    if changed:
        return Recheck(timed_inputs_changed(changed), time_ms, waited, changed)
    raw, mutated = received_outputs(header, data, ctx.device_type)
    observed = Observed(p.REFILL, 0, inputs, p.CallReport(), raw, mutated)
    try:
        flat = _check_shape_of(observed, oracle)
    except StageFailure as failure:
        return Recheck(failure.message, time_ms, waited)
    result = oracle.compare(flat, inputs)
    if not result.ok:
        return Recheck(result.problem, time_ms, waited)
    later = calls_to_check(calls, random.SystemRandom())[1:2]
    problem = _one_output_problem(ctx, oracle, contestant, timed, 0, later[0]) if later else None
    if problem:
        problem = (f"call {later[0] + 1} of the replay, on copies of the values timed before, "
                   f"gave a wrong output ({problem}): it did not compute from its own inputs")
    return Recheck(problem, time_ms, waited)
