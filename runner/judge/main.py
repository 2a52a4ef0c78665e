"""Entry point of the judge process, and its loop over one operator's shapes.

Protocol with the evaluator: the job arrives as JSON on stdin (`--channel-fd N`) or in a file
(`--job FILE --channel FILE`, container mode); results leave as JSON lines on the channel. The
judge imports the op's reference and input generator (the oracle) and never a candidate: each
contestant runs in its own executor process (`contestant.py`), and only data comes back.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import torch

from ..channel import KEY_VARIABLE, Sealer
from ..config import Tolerance
from ..model import Finding, Status
from ..modload import load_module
from ..repo import OpSpec
from ..zygote import Zygote
from . import procs, stages, survey, timing
from .contestant import Contestant, ContestantFailed, ContestantSpec
from .oracle import FormatProblem, JudgeContext, ShapeOracle
from .verdict import StageFailure, Verdict

EXIT_FATAL = 3  # the judge's own CUDA context is unusable: the evaluator starts a fresh judge


class Channel:
    """Sealed JSON lines to the evaluator (runner/channel.py): a pipe (subprocess) or a file in
    the scratch mount."""

    def __init__(self, fd: int, key: str):
        self.fd = fd
        self.sealer = Sealer(key)

    @classmethod
    def to_file(cls, path: str, key: str) -> Channel:
        return cls(os.open(path, os.O_WRONLY | os.O_APPEND), key)

    def send(self, kind: str, **payload) -> None:
        data = self.sealer.seal(kind, payload)
        while data:
            data = data[os.write(self.fd, data):]


def main(argv: list[str]) -> int:
    """`--channel-fd N` (job on stdin) or `--job FILE --channel FILE` (container mode); with
    `--zygote-fd N` the executors are forked from that zygote (runner/zygote.py)."""
    procs.die_with_parent()
    procs.become_subreaper()
    procs.refuse_inspection()
    key = os.environ.pop(KEY_VARIABLE, None)  # before any executor inherits the environment
    if not key:
        print(f"the evaluator gave no {KEY_VARIABLE}", file=sys.stderr)
        return 2
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    if "--channel-fd" in args:
        channel = Channel(int(args["--channel-fd"]), key)
        job = json.loads(sys.stdin.read())
    else:
        channel = Channel.to_file(args["--channel"], key)
        job = json.loads(Path(args["--job"]).read_text())
    if job.get("mode") == "survey":
        return _survey_ops(job, channel)
    zygote = Zygote.from_fd(int(args["--zygote-fd"])) if "--zygote-fd" in args else None
    ctx = _context(job)
    if ctx.device_type == "cpu":
        from ..executor.devmap import CudaToCpu  # the same cuda -> cpu mapping as executors

        CudaToCpu().__enter__()
    with tempfile.TemporaryDirectory(prefix="atrex-judge-") as scratch:
        contestants = _contestants(job, ctx, Path(scratch), zygote)
        try:
            return _run(ctx, job, contestants, channel)
        except FormatProblem as problem:
            channel.send("format_error", path=problem.path, field=problem.field,
                         message=problem.message)
            return 2
        finally:
            for contestant in contestants:
                contestant.stop()


def _context(job: dict) -> JudgeContext:
    return JudgeContext(
        op=OpSpec.from_dict(job["op"]), device_type=job["device"], trials=job["trials"],
        tolerances={k: Tolerance(*v) for k, v in job["tolerances"].items()},
        reference_dtype=job["reference_dtype"], own_share_threshold=job["own_share_threshold"],
        peaks=job["peaks"], time=job["time"] and job["device"] == "cuda",
        config_path=job.get("config_path") or "atrex.toml")


def _contestants(job: dict, ctx: JudgeContext, scratch: Path,
                 zygote: Zygote | None) -> list[Contestant]:
    contestants = []
    for c in job["candidates"]:
        spec = ContestantSpec(c["label"], Path(c["kernel"]), Path(c["root"]),
                              c.get("role", "candidate"), tuple(c.get("writable", ())),
                              tuple(c.get("unreadable", ())))
        contestants.append(Contestant(spec, ctx.device_type, scratch, job["timeout_s"],
                                      list(ctx.op.mutates), zygote))
    _start_ahead(contestants, 0)
    return contestants


def _start_ahead(contestants: list[Contestant], index: int) -> None:
    """Start the executors from `index` on, as many at a time as there are cores to import them
    with: their imports overlap the judge's own loading and each other's, without a machine of
    two cores importing torch thirty times at once (and missing every load deadline)."""
    window = max(1, (os.cpu_count() or 2) // 2)
    for contestant in contestants[index:index + window]:
        if contestant.proc is None:
            contestant.start()


def _run(ctx: JudgeContext, job: dict, contestants: list[Contestant], channel: Channel) -> int:
    import torch._dynamo  # noqa: F401 - it rewraps torch.manual_seed on import; do it first

    ctx.reference_module = load_module(ctx.op.path / "reference.py", "atrex_reference")
    ctx.input_module = load_module(ctx.op.path / "input.py", "atrex_inputs")
    shape_ids = _plan_shapes(ctx, job, channel)
    if not shape_ids:
        channel.send("done")
        return 0
    if ctx.time:  # before any candidate is loaded (timing.CLEAN_MARGIN says why)
        ctx.clean_fixed_ms = timing.clean_fixed_costs(torch.device(ctx.device_type))
    for index, contestant in enumerate(contestants):
        _start_ahead(contestants, index)
        channel.send("begin", shape=None, label=contestant.label, stage="load")
        _load(contestant, channel, lambda c=contestant: c.load())
    live = [c for c in contestants if not c.dead]
    channel.send("ready", landlock_abi={c.label: c.landlock_abi for c in live},
                 hidden_paths={c.label: c.hidden_paths for c in live})
    for contestant in contestants:
        contestant.heartbeat = lambda: channel.send("alive")
        contestant.siblings = lambda: [c.pid for c in contestants if c.pid is not None]
    policy = timing.TimingPolicy(**job.get("timing_policy", {}))
    skip = job.get("skip", {})
    for shape_id in shape_ids:
        if _run_shape(ctx, ctx.op.shape(shape_id), contestants, skip.get(shape_id, []), policy,
                      channel):
            return EXIT_FATAL
    channel.send("done")
    return 0


def _plan_shapes(ctx: JudgeContext, job: dict, channel: Channel) -> list[str]:
    """The shapes to run: the --max-shapes smallest by input bytes, less those over the CPU
    memory budget (each sent as `skipped` with its reason)."""
    shape_ids = list(job["shape_ids"])
    count, budget = job.get("max_shapes"), job.get("memory_budget_bytes")
    if not count and not budget:
        return shape_ids
    surveys = []
    for shape_id in shape_ids:
        surveys.append(survey.survey_shape(ctx, ctx.op.shape(shape_id)))
        channel.send("alive")  # the evaluator's deadline counts from the last message
    if count:
        shape_ids = survey.select_smallest(surveys, count)
        channel.send("selected", shapes=shape_ids)
    runnable = []
    for entry in surveys:
        if entry.shape_id not in shape_ids:
            continue
        reason = survey.over_budget(entry, budget) if budget else None
        if reason:
            channel.send("skipped", shape=entry.shape_id, message=reason)
        else:
            runnable.append(entry.shape_id)
    return runnable


def _survey_ops(job: dict, channel: Channel) -> int:
    """`atrex weights`: each op's shapes as tensor shapes, drawn on the meta device."""
    for index, op in enumerate(job["ops"]):
        ctx = _context({**job, "op": op})
        try:
            ctx.reference_module = load_module(ctx.op.path / "reference.py", f"atrex_ref{index}")
            ctx.input_module = load_module(ctx.op.path / "input.py", f"atrex_inputs{index}")
        except Exception as exc:  # noqa: BLE001 - the op's own files: reported, others go on
            channel.send("survey_failed", op=ctx.op.name, message=f"{type(exc).__name__}: {exc}")
            continue
        for shape in ctx.op.shapes:
            channel.send("survey", op=ctx.op.name, **survey.survey_shape(ctx, shape).payload())
    channel.send("done")
    return 0


def _load(contestant: Contestant, channel: Channel, load) -> None:
    """Start (or restart) a contestant's executor; a failure is that contestant's verdict."""
    try:
        raised, flags = load()
    except ContestantFailed as failure:
        raised, flags, verdict = None, [], Verdict.failed(StageFailure(
            failure.status, failure.kind, failure.message))
    else:
        verdict = None
        if raised is not None:
            verdict = Verdict.failed(stages.raised_failure(raised))
        elif flags and contestant.spec.role != "baseline":
            kind = stages.flag_kind(flags[0].kind)
            verdict = Verdict(Status.SUSPICIOUS, message=flags[0].message,
                              findings=[Finding(kind, flags[0].message)])
    if verdict is not None:
        contestant.dead = True
        contestant.kill()
        channel.send("candidate_failed", label=contestant.label, verdict=verdict.payload())


def _run_shape(ctx: JudgeContext, shape, contestants: list[Contestant], skip: list[str],
               policy: timing.TimingPolicy, channel: Channel) -> bool:
    """Judge every contestant on one shape, then time the passing ones. True if CUDA is broken
    in the judge itself."""
    channel.send("begin", shape=shape.id, label=None, stage="reference")
    oracle = ShapeOracle(ctx, shape)
    work = oracle.work
    channel.send("work", shape=shape.id, flops=work.flops, bytes=work.bytes,
                 bytes_read=work.bytes_read, bytes_written=work.bytes_written,
                 flops_source=work.flops_source, bytes_source=work.bytes_source)
    passing: dict[str, Contestant] = {}
    for contestant in contestants:
        if contestant.dead or contestant.label in skip:
            continue
        if contestant.broken:
            _load(contestant, channel, contestant.restart)
            if contestant.dead:
                continue
        channel.send("begin", shape=shape.id, label=contestant.label, stage="check")
        verdict = stages.judge(ctx, oracle, contestant)
        channel.send("checked", shape=shape.id, label=contestant.label,
                     verdict=verdict.payload())
        if verdict.status is Status.PASS:
            passing[contestant.label] = contestant
    if ctx.time and passing:
        channel.send("begin", shape=shape.id, label=None, stage="time")
        channel.send("timed", shape=shape.id,
                     results=timing.time_shape(ctx, oracle, passing, policy))
    del oracle
    if ctx.device_type == "cuda":
        return _judge_cuda_broken()
    return False


def _judge_cuda_broken() -> bool:
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - the judge's own context is gone
        return True
    return False

