"""The stages that judge one candidate on one shape, in order, stopping at the first failure:
correctness over fresh draws (with the cheap anti-cheat guards riding along), fallback detection,
and the input-perturbation check for cached outputs. Each stage raises `StageFailure`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import torch

from ..model import Finding, FindingKind, Status
from .compare import StructureError, check_structure, compare_outputs, flatten_output, same_bytes
from .guard import live_threads, new_threads, subclass_outputs
from .tracking import ComputeOp, DispatchRecorder, KernelLaunch, tally_compute


class StageFailure(Exception):
    def __init__(self, status: Status, kind: FindingKind, message: str,
                 own_share: float | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.own_share = own_share


@dataclass
class TrialStats:
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    compute_ops: list[ComputeOp] = field(default_factory=list)
    launches: list[KernelLaunch] = field(default_factory=list)
    last_inputs: dict | None = None


@dataclass
class Verdict:
    status: Status
    findings: list[Finding] = field(default_factory=list)
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    own_share: float | None = None
    message: str | None = None


def call(model, inputs: dict):
    with torch.no_grad():
        return model(**inputs)


def new_seed() -> int:
    # Drawn here, in the worker, at the moment of use: nothing the candidate can read beforehand.
    return secrets.randbits(62)


def clone_inputs(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def run_trials(ctx, sc, cand, model) -> TrialStats:
    stats = TrialStats()
    previous: tuple[dict, dict] | None = None
    for trial in range(ctx.trials):
        seed = new_seed()
        inputs = sc.draw(seed)
        snapshot = clone_inputs(inputs)
        flat, launches, compute = _guarded_forward(ctx, sc, model, inputs, seed)
        _check_inputs_untouched(sc, inputs, snapshot, seed)
        flat.update(sc.mutated_outputs(inputs))
        comparison = compare_outputs(flat, sc.reference(snapshot), ctx.tolerance_for)
        if not comparison.ok:
            raise StageFailure(Status.INCORRECT, comparison.kind or FindingKind.MISMATCH,
                               f"{comparison.problem} (trial {trial + 1}, seed {seed})")
        if previous is not None:
            _check_previous_output_kept(*previous)
        previous = ({k: v for k, v in flat.items() if not k.startswith("input:")},
                    {k: v.clone() for k, v in flat.items() if not k.startswith("input:")})
        stats.max_abs_error = max(stats.max_abs_error, comparison.max_abs_error or 0.0)
        stats.max_rel_error = max(stats.max_rel_error, comparison.max_rel_error or 0.0)
        if trial == 0:
            stats.compute_ops, stats.launches = compute, launches
        stats.last_inputs = inputs
    return stats


def baseline_trials(ctx, sc, model) -> TrialStats:
    """Correctness only, for baselines (the reference run eagerly or through torch.compile)."""
    stats = TrialStats()
    for trial in range(ctx.trials):
        seed = new_seed()
        inputs = sc.draw(seed)
        snapshot = clone_inputs(inputs)
        try:
            flat = check_structure(call(model, inputs), sc.expected)
        except StructureError as exc:
            raise StageFailure(Status.INCORRECT, FindingKind.STRUCTURE, str(exc)) from None
        ctx.synchronize()
        flat.update(sc.mutated_outputs(inputs))
        comparison = compare_outputs(flat, sc.reference(snapshot), ctx.tolerance_for)
        if not comparison.ok:
            raise StageFailure(Status.INCORRECT, comparison.kind or FindingKind.MISMATCH,
                               f"{comparison.problem} (trial {trial + 1}, seed {seed})")
        stats.max_abs_error = max(stats.max_abs_error, comparison.max_abs_error or 0.0)
        stats.max_rel_error = max(stats.max_rel_error, comparison.max_rel_error or 0.0)
    return stats


def _guarded_forward(ctx, sc, model, inputs, seed):
    """One forward with the dispatch recorder on and the cheap anti-cheat guards around it."""
    ctx.tracker.reset()
    recorder = DispatchRecorder(
        own_launches=lambda: sum(launch.own for launch in ctx.tracker.launches))
    ctx.tracker.recorder = recorder
    threads_before = live_threads()
    try:
        with recorder:
            out = call(model, inputs)
    finally:
        ctx.tracker.recorder = None
    ctx.check_guard()
    spawned = new_threads(threads_before)
    if spawned:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.SIDE_THREAD,
                           f"forward returned while its threads {spawned} were still running")
    raw = flatten_output(out)
    subclasses = subclass_outputs(raw)
    if subclasses:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.TENSOR_SUBCLASS,
                           f"outputs are not plain tensors: {', '.join(subclasses)}")
    try:
        flat = check_structure(out, sc.expected)
    except StructureError as exc:
        raise StageFailure(Status.INCORRECT, FindingKind.STRUCTURE, str(exc)) from None
    early = {k: v.clone() for k, v in flat.items()}
    ctx.synchronize()
    changed = [k for k in flat if not same_bytes(early[k], flat[k])]
    if changed:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.LAZY_OUTPUT,
                           f"outputs {changed} were still being written after forward returned")
    return flat, list(ctx.tracker.launches), list(recorder.compute)


def _check_inputs_untouched(sc, inputs, snapshot, seed) -> None:
    touched = [k for k, v in inputs.items()
               if isinstance(v, torch.Tensor) and k not in sc.mutates
               and not same_bytes(v, snapshot[k])]
    if touched:
        raise StageFailure(Status.INCORRECT, FindingKind.INPUT_MUTATION,
                           f"forward modified its inputs {touched} (seed {seed}); declare them in "
                           "metadata.json 'mutates' if the operator updates them in place")


def _check_previous_output_kept(outputs: dict, clones: dict) -> None:
    overwritten = [k for k, v in outputs.items() if not same_bytes(v, clones[k])]
    if overwritten:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.STALE_OUTPUT,
                           f"a later call overwrote the earlier call's outputs {overwritten}: the "
                           "kernel hands out one reused buffer instead of a fresh result")


def fallback_share(ctx, sc, cand, model, stats: TrialStats) -> float:
    """The own-kernel share over the layers that apply here; raises on fallback."""
    if not any(launch.own for launch in stats.launches):
        library = sorted({launch.name for launch in stats.launches})
        raise StageFailure(Status.FALLBACK, FindingKind.NO_OWN_KERNEL,
                           "no kernel defined in the repository ran"
                           + (f" (only library kernels: {', '.join(library)})" if library else ""),
                           own_share=0.0)
    share = _dispatch_share(ctx, sc, stats.compute_ops)
    if share < ctx.own_share_threshold:
        top = _top_compute(stats.compute_ops)
        raise StageFailure(Status.FALLBACK, FindingKind.DISPATCH_FALLBACK,
                           f"own-kernel share {share:.2f} is below {ctx.own_share_threshold:.2f}"
                           + (f"; PyTorch computed: {top}" if top else ""), own_share=share)
    if ctx.device_type == "cuda":
        share = min(share, _device_share(ctx, sc, model))
    _ghost_replay(ctx, sc, model)
    return share


def _dispatch_share(ctx, sc, compute_ops: list[ComputeOp]) -> float:
    if not compute_ops:
        return 1.0
    fallback_sol = ctx.sol_ms(tally_compute(compute_ops))
    if sc.reference_sol_ms <= 0:
        return 0.0
    return max(0.0, 1.0 - min(1.0, fallback_sol / sc.reference_sol_ms))


def _top_compute(ops: list[ComputeOp], limit: int = 4) -> str:
    weights: dict[str, float] = {}
    for op in ops:
        weights[op.name] = weights.get(op.name, 0.0) + op.bytes + op.flops
    ranked = sorted(weights, key=weights.get, reverse=True)[:limit]
    return ", ".join(name if "::" in name else f"aten.{name}" for name in ranked)


def _device_share(ctx, sc, model) -> float:
    from .profile import profile_forward

    inputs = sc.draw(new_seed())
    profile = profile_forward(lambda: call(model, inputs), ctx.tracker.own_kernel_names())
    if profile.late_kernels:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.SIDE_STREAM,
                           f"kernels {sorted(set(profile.late_kernels))} were still running after "
                           "forward returned: work on a stream the caller never waited for")
    if profile.own_share < ctx.own_share_threshold:
        top = sorted(profile.library_kernels, key=profile.library_kernels.get, reverse=True)[:4]
        raise StageFailure(Status.FALLBACK, FindingKind.LIBRARY_KERNEL_TIME,
                           f"own kernels took {profile.own_share:.0%} of device time; library "
                           f"kernels: {', '.join(top)} ({profile.library_ms:.3f} ms)",
                           own_share=profile.own_share)
    return profile.own_share


def _ghost_replay(ctx, sc, model) -> None:
    """Run with the repository's kernels turned into no-ops: a matching output was not theirs."""
    seed = new_seed()
    inputs = sc.draw(seed)
    snapshot = clone_inputs(inputs)
    ctx.tracker.ghost = True
    try:
        flat = check_structure(call(model, inputs), sc.expected)
        ctx.synchronize()
        flat.update(sc.mutated_outputs(inputs))
        matched = compare_outputs(flat, sc.reference(snapshot), ctx.tolerance_for).ok
    except Exception:
        matched = False  # the candidate cannot produce an output without its kernels: good
    finally:
        ctx.tracker.ghost = False
    if matched:
        raise StageFailure(Status.FALLBACK, FindingKind.GHOST_REPLAY,
                           "the output still matched the reference with the repository's kernels "
                           f"disabled (seed {seed}): they did not compute it", own_share=0.0)


def perturbation_check(ctx, sc, model, inputs: dict) -> None:
    """Same buffers, new values: an output cached by pointer or fingerprint comes back stale."""
    fresh = sc.draw(new_seed())
    if not refill(inputs, fresh):
        inputs = fresh
    snapshot = clone_inputs(inputs)
    flat = check_structure(call(model, inputs), sc.expected)
    ctx.synchronize()
    flat.update(sc.mutated_outputs(inputs))
    comparison = compare_outputs(flat, sc.reference(snapshot), ctx.tolerance_for)
    if not comparison.ok:
        raise StageFailure(Status.SUSPICIOUS, FindingKind.OUTPUT_CACHE,
                           "correct on fresh tensors but wrong after new values were written into "
                           f"the same tensors: the output is cached ({comparison.problem})")


def refill(inputs: dict, fresh: dict) -> bool:
    """Copy fresh values into the existing input tensors; False when the shapes differ."""
    pairs = [(inputs[k], fresh[k]) for k in inputs if isinstance(inputs[k], torch.Tensor)]
    if any(a.shape != b.shape or a.dtype != b.dtype for a, b in pairs):
        return False
    if any(inputs[k] != fresh[k] for k in inputs if not isinstance(inputs[k], torch.Tensor)):
        return False
    for a, b in pairs:
        a.copy_(b)
    return True
