"""Entry point of the worker process (see session.py for the protocol)."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import torch

from ..config import Tolerance
from ..model import Finding, FindingKind, Status
from ..repo import OpSpec
from . import checks, compare, session, timing
from .checks import StageFailure, Verdict, call, clone_inputs, new_seed
from .guard import IdentityGuard
from .session import EXIT_FATAL, Candidate, Channel, Context, ShapeContext, load_module
from .tracking import KernelTracker


def main(argv: list[str]) -> int:
    """`--channel-fd N` (job on stdin) or `--job FILE --channel FILE` (container mode)."""
    _die_with_parent()
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    if "--channel-fd" in args:
        channel = Channel(int(args["--channel-fd"]))
        job = json.loads(sys.stdin.read())
    else:
        channel = Channel.to_file(args["--channel"])
        job = json.loads(Path(args["--job"]).read_text())
    ctx = _context(job)
    if ctx.device_type == "cpu":
        from .devmap import CudaToCpu

        CudaToCpu().__enter__()  # for the whole life of this process
    try:
        _load(ctx, job, channel)
    except session._FormatProblem as problem:
        channel.send("format_error", path=problem.path, field=problem.field,
                     message=problem.message)
        return 2
    channel.send("ready")
    for shape_id in job["shape_ids"]:
        fatal = run_shape(ctx, ctx.op.shape(shape_id), channel)
        if fatal:
            return EXIT_FATAL
    channel.send("done")
    return 0


def _die_with_parent() -> None:
    """A worker whose evaluator was killed (kill -9 of a bot worker) must not keep the GPU busy
    under a retried job: ask Linux to kill us when the parent goes."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import os
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the request took effect
        os._exit(1)


def _context(job: dict) -> Context:
    op = OpSpec.from_dict(job["op"])
    roots = [Path(c["root"]) for c in job["candidates"] if c.get("role") != "baseline"]
    tracker = KernelTracker(own_roots=roots)
    tracker.install()
    return Context(
        op=op, device_type=job["device"], trials=job["trials"],
        tolerances={k: Tolerance(*v) for k, v in job["tolerances"].items()},
        reference_dtype=job["reference_dtype"], own_share_threshold=job["own_share_threshold"],
        peaks=job["peaks"], time=job["time"] and job["device"] == "cuda",
        timing_policy=timing.TimingPolicy(**job.get("timing_policy", {})), tracker=tracker,
        skip=job.get("skip", {}),
        candidates=[Candidate(c["label"], Path(c["kernel"]), Path(c["root"]),
                              c.get("role", "candidate")) for c in job["candidates"]])


def _load(ctx: Context, job: dict, channel: Channel) -> None:
    import torch._dynamo  # noqa: F401 - it rewraps torch.manual_seed on import; do it before the snapshot

    op_dir = ctx.op.path
    ctx.reference_module = load_module(op_dir / "reference.py", "atrex_reference", [])
    ctx.input_module = load_module(op_dir / "input.py", "atrex_inputs", [])
    evaluator = [sys.modules[m] for m in list(sys.modules)
                 if m.startswith("runner.") and sys.modules[m] is not None]
    ctx.guard = IdentityGuard(evaluator, {
        "reference.Model.forward": ctx.reference_module.Model.forward,
        "inputs._make_inputs": ctx.input_module._make_inputs,
    })
    for index, cand in enumerate(ctx.candidates):
        channel.send("begin", shape=None, label=cand.label, stage="load")
        try:
            module = load_module(cand.kernel, f"atrex_candidate_{index}",
                                 [cand.kernel.parent, cand.root])
            cand.model_cls = module.Model
            if cand.role != "baseline":
                ctx.check_guard()
        except StageFailure as failure:
            cand.failure = _verdict(failure)
        except BaseException as exc:  # noqa: BLE001 - any import failure is the candidate's
            cand.failure = _error_verdict(exc, cand.kernel, compile_time=True)
        if cand.failure is not None:
            channel.send("candidate_failed", label=cand.label, verdict=_verdict_payload(
                cand.failure))


def run_shape(ctx: Context, shape, channel: Channel) -> bool:
    """Judge every candidate on one shape, then time the passing ones. True if CUDA is broken."""
    channel.send("begin", shape=shape.id, label=None, stage="reference")
    try:
        sc = ShapeContext(ctx, shape)
    except session._FormatProblem as problem:
        channel.send("format_error", path=problem.path, field=problem.field,
                     message=problem.message)
        raise SystemExit(2) from None
    channel.send("work", shape=shape.id, flops=sc.work.flops, bytes=sc.work.bytes)
    passing: dict[str, object] = {}
    for cand in ctx.candidates:
        if cand.failure is not None or cand.label in ctx.skip.get(shape.id, ()):
            continue
        channel.send("begin", shape=shape.id, label=cand.label, stage="check")
        verdict, model = judge(ctx, sc, cand)
        channel.send("checked", shape=shape.id, label=cand.label,
                     verdict=_verdict_payload(verdict))
        if _cuda_broken(verdict):
            return True
        if verdict.status is Status.PASS:
            passing[cand.label] = model
    if ctx.time and passing:
        channel.send("begin", shape=shape.id, label=None, stage="time")
        channel.send("timed", shape=shape.id, results=time_shape(ctx, sc, passing))
    del sc
    if ctx.device_type == "cuda":
        torch.cuda.empty_cache()
    return False


def judge(ctx: Context, sc: ShapeContext, cand: Candidate) -> tuple[Verdict, object]:
    model = None
    try:
        model = session._build_model(cand.model_cls, sc.shape.init_kwargs, sc.device,
                                     like=sc.ref_model)
        if cand.role == "baseline":
            stats = checks.baseline_trials(ctx, sc, model)
            return Verdict(Status.PASS, max_abs_error=stats.max_abs_error,
                           max_rel_error=stats.max_rel_error), model
        stats = checks.run_trials(ctx, sc, cand, model)
        share = checks.fallback_share(ctx, sc, cand, model, stats)
        checks.perturbation_check(ctx, sc, model, stats.last_inputs)
        return Verdict(Status.PASS, max_abs_error=stats.max_abs_error,
                       max_rel_error=stats.max_rel_error, own_share=share), model
    except StageFailure as failure:
        return _verdict(failure), model
    except session._FormatProblem:
        raise
    except Exception as exc:  # noqa: BLE001 - a crash of the candidate is a status, not ours
        return _error_verdict(exc, cand.kernel, compile_time=False), model


def time_shape(ctx: Context, sc: ShapeContext, models: dict[str, object]) -> dict[str, dict]:
    """Interleaved timing of the passing candidates, then a recheck with fresh values."""
    # one draw, cloned per contestant: data-dependent work (MoE routing, sampling) is the same
    # for everyone in an interleaved comparison
    drawn = sc.draw(new_seed())
    inputs = {label: clone_inputs(drawn) for label in models}
    outputs: dict[str, object] = {}
    eager = {label: _calling(models[label], inputs[label], outputs, label) for label in models}
    flush = timing.L2Flusher(sc.device)
    for fn in eager.values():
        timing.warm_up(fn)
    estimate = min(timing.quick_estimate_ms(fn, flush) for fn in eager.values())
    timed = {label: timing.Timed(fn, "cuda_events") for label, fn in eager.items()}
    launch_bound = (sc.reference_sol_ms < timing.LAUNCH_BOUND_SOL_MS
                    or estimate < timing.LAUNCH_BOUND_EAGER_MS)
    if launch_bound:
        free_bytes, _ = torch.cuda.mem_get_info(sc.device)
        calls = timing.graph_calls(_tensor_bytes(drawn), len(models), free_bytes)
        # per contestant: one that cannot be captured (a host sync) keeps event timing without
        # dragging the others back to launch-latency-bound numbers; the method is reported
        for label in models:
            graphed = _graph_timed(models[label], eager[label], inputs[label], calls)
            timed[label] = graphed or timed[label]
    results = timing.measure_interleaved(timed, flush, ctx.timing_policy)
    payload = {}
    for label, result in results.items():
        problem = _recheck(ctx, sc, timed[label].fn, inputs[label], outputs, label)
        payload[label] = {"median_ms": result.median_ms, "mean_ms": result.mean_ms,
                          "rse": result.rse, "reps": result.reps, "method": result.method,
                          "calls_per_sample": result.calls_per_sample,
                          "launch_bound": launch_bound, "recheck_problem": problem}
    return payload


def _calling(model, inputs: dict, outputs: dict, label: str):
    def run():
        outputs[label] = call(model, inputs)
    return run


def _graph_timed(model, first_call, inputs: dict, calls: int) -> timing.Timed | None:
    """One graph of `calls` calls: the first on the contestant's inputs (so the recheck sees its
    output), the others on their own copies, so every call reads inputs the flush left cold."""
    spare: dict[str, object] = {}
    copies = [clone_inputs(inputs) for _ in range(calls - 1)]
    sequence = [first_call] + [_calling(model, copy, spare, "spare") for copy in copies]
    replay = timing.try_graph(sequence)
    return None if replay is None else timing.Timed(replay, "cuda_graph", calls)


def _tensor_bytes(inputs: dict) -> int:
    return sum(v.numel() * v.element_size() for v in inputs.values() if isinstance(v, torch.Tensor))


def _recheck(ctx, sc, fn, inputs, outputs, label) -> str | None:
    """After timing: new values in the timed buffers must give the new reference output."""
    fresh = sc.draw(new_seed())
    if not checks.refill(inputs, fresh):
        return None
    snapshot = clone_inputs(inputs)
    fn()
    ctx.synchronize()
    flat = compare.check_structure(outputs[label], sc.expected)
    flat.update(sc.mutated_outputs(inputs))
    result = compare.compare_outputs(flat, sc.reference(snapshot), ctx.tolerance_for)
    return None if result.ok else result.problem


def _verdict(failure: StageFailure) -> Verdict:
    return Verdict(failure.status, findings=[Finding(failure.kind, failure.message)],
                   message=failure.message, own_share=failure.own_share)


_COMPILE_ERRORS = ("CompilationError", "OutOfResources", "SyntaxError", "IndentationError",
                   "ImportError", "ModuleNotFoundError", "CalledProcessError", "BuildError")


def _error_verdict(exc: BaseException, kernel: Path, compile_time: bool) -> Verdict:
    name = type(exc).__name__
    compile_error = compile_time or name in _COMPILE_ERRORS or "triton.compiler" in (
        type(exc).__module__ or "")
    status = Status.COMPILE_ERROR if compile_error else Status.RUNTIME_ERROR
    file, line = _location(exc, kernel)
    message = f"{name}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:600]
    if isinstance(exc, torch.OutOfMemoryError):
        message = "out of GPU memory: " + message
    kind = FindingKind.COMPILE_ERROR if compile_error else FindingKind.RUNTIME_ERROR
    return Verdict(status, findings=[Finding(kind, message, file, line)], message=message)


def _location(exc: BaseException, kernel: Path) -> tuple[str | None, int | None]:
    if isinstance(exc, SyntaxError) and exc.filename:
        return Path(exc.filename).name, exc.lineno
    frames = traceback.extract_tb(exc.__traceback__)
    root = kernel.parent
    for frame in reversed(frames):
        if frame.filename.startswith(str(root)):
            return str(Path(frame.filename).relative_to(root)), frame.lineno
    return None, None


def _cuda_broken(verdict: Verdict) -> bool:
    text = verdict.message or ""
    return verdict.status is Status.RUNTIME_ERROR and any(
        marker in text for marker in ("CUDA error", "AcceleratorError", "illegal memory access",
                                      "device-side assert", "unspecified launch failure"))


def _verdict_payload(verdict: Verdict) -> dict:
    return {"status": verdict.status.value, "max_abs_error": verdict.max_abs_error,
            "max_rel_error": verdict.max_rel_error, "own_share": verdict.own_share,
            "message": verdict.message,
            "findings": [{"kind": f.kind.value, "message": f.message, "file": f.file,
                          "line": f.line} for f in verdict.findings]}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
