"""Evaluating candidates and assembling the report: a pipeline of small stages.

plan (which kernels, which shapes) -> judge jobs (sandbox.run_job) -> shape results (roofline,
beyond-roofline check) -> op results (status, own-kernel share, E_op) -> report (importance, score).
`evaluate` takes several labelled candidates per operator and judges them in one judge process
(one executor process each), so base and head (or incumbent and proposal) are timed interleaved
on the same GPU.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__, astscan, scoring
from .config import RepoConfig
from .errors import FormatError
from .launch import Launcher, choose_launcher
from .model import (
    DeviceInfo,
    Finding,
    FindingKind,
    OpResult,
    Report,
    ShapeResult,
    Status,
    worst_status,
)
from .peaks import detect_device
from .repo import OpSpec, RepoSpec
from .sandbox import CandidateRef, JobOutcome, WorkerJob, device_lock, run_job

# A measured time this far under the datasheet floor is not physics: something skipped the work.
BEYOND_ROOFLINE = 1.05

ProgressFn = Callable[[str, str, str | None], None]  # (op, shape id, candidate label)


@dataclass
class EvalOptions:
    device: str = "auto"  # "auto", "cpu" or "cuda"
    device_index: int = 0
    trials: int | None = None  # default: atrex.toml thresholds.trials
    time: bool = True
    timeout_s: float | None = None  # default: atrex.toml, per op
    timing_policy: dict = field(default_factory=dict)
    sandbox: str = "auto"  # "subprocess", "container" or "auto" (see runner/launch.py)
    launcher: Launcher | None = None  # an explicit launcher overrides `sandbox`

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


def evaluate_repo(repo: RepoSpec, options: EvalOptions, progress: ProgressFn | None = None,
                  label: str = "head") -> Report:
    plan = {op.name: [CandidateRef(label, op.path / op.kernel_file, repo.root)] for op in repo.ops}
    return evaluate(repo, plan, options, progress)[label]


def evaluate(repo: RepoSpec, plan: dict[str, list[CandidateRef]], options: EvalOptions,
             progress: ProgressFn | None = None) -> dict[str, Report]:
    """One report per candidate label; every op's candidates share one judge and one GPU lock."""
    device = options.resolved_device()
    info = detect_device(device, options.device_index, repo.config.gpu)
    launcher = options.launcher or _launcher(options.sandbox)
    info.sandbox = launcher.name
    labels = list(dict.fromkeys(c.label for cands in plan.values() for c in cands))
    per_label: dict[str, list[OpResult]] = {label: [] for label in labels}
    notes: list[str] = []
    for op in repo.ops:
        candidates = plan.get(op.name)
        if not candidates:
            continue
        shape_ids = [s.id for s in op.shapes if device in s.targets]
        if not shape_ids:
            notes.append(f"{op.name}: no shape targets {device}; not evaluated")
            continue
        job = _job(repo.config, op, candidates, shape_ids, device, options, info)
        on_progress = (lambda shape, label, _op=op.name: progress(_op, shape, label)) \
            if progress else None
        with device_lock(device, options.device_index):
            outcome = run_job(job, on_progress, launcher)
        for cand in candidates:
            per_label[cand.label].append(
                op_result(op, cand, shape_ids, outcome, info, repo.root))
    return {label: build_report(info, per_label[label], repo, notes, device == "cuda"
                                and options.time) for label in labels}


def _launcher(mode: str) -> Launcher:
    try:
        return choose_launcher(mode)
    except ValueError as exc:
        raise FormatError("ATREX_SANDBOX", None, str(exc)) from None


def _job(config: RepoConfig, op: OpSpec, candidates, shape_ids, device, options,
         info: DeviceInfo) -> WorkerJob:
    override = config.ops.get(op.name)
    dtypes = set(config.tolerances) | set(override.tolerances if override else {})
    tolerances = {}
    for dtype in dtypes:
        tol = config.tolerance(op.name, dtype)
        tolerances[dtype] = [tol.atol, tol.rtol, tol.rel_l2]
    peaks = info.peaks
    return WorkerJob(
        op=op.to_dict(), candidates=candidates, shape_ids=shape_ids, device=device,
        device_index=options.device_index, trials=options.trials or config.trials,
        tolerances=tolerances, reference_dtype=config.reference_dtype_for(op.name),
        own_share_threshold=config.own_kernel_share,
        peaks={"tflops": peaks.tflops, "bandwidth_tbps": peaks.bandwidth_tbps} if peaks else
        {"tflops": {"bf16": 989.4}, "bandwidth_tbps": 4.8},
        time=options.time, timeout_s=options.timeout_s or config.timeout_for(op.name),
        timing_policy=options.timing_policy)


def op_result(op: OpSpec, cand: CandidateRef, shape_ids: list[str], outcome: JobOutcome,
              info: DeviceInfo, repo_root: Path) -> OpResult:
    shapes = [shape_result(op, cand.label, shape_id, outcome, info) for shape_id in shape_ids]
    findings = astscan.static_findings(cand.kernel, cand.root)
    for shape in shapes:
        findings.extend(_shape_findings(outcome, cand.label, shape.id))
    shares = [s.own_kernel_share for s in shapes if s.own_kernel_share is not None]
    result = OpResult(
        name=op.name, status=worst_status(s.status for s in shapes),
        own_kernel_share=min(shares) if shares else None,
        findings=_dedupe(findings), shapes=shapes)
    result.score = scoring.op_efficiency(shapes)
    result.score_measured = scoring.measured_efficiency(shapes) if info.peaks_measured else None
    if result.status is Status.PASS:
        result.gpu_hours_at_stake = scoring.gpu_hours_at_stake(shapes, op.trace_scale)
    return result


def shape_result(op: OpSpec, label: str, shape_id: str, outcome: JobOutcome,
                 info: DeviceInfo) -> ShapeResult:
    verdict = outcome.verdicts.get((label, shape_id)) or outcome.verdicts.get((label, "*")) or {
        "status": "runtime_error", "message": "the judge produced no result for this shape"}
    work = outcome.work.get(shape_id)
    shape = ShapeResult(id=shape_id, status=Status(verdict["status"]),
                        weight=op.shape(shape_id).weight,
                        own_kernel_share=verdict.get("own_share"),
                        max_abs_error=verdict.get("max_abs_error"),
                        max_rel_error=verdict.get("max_rel_error"),
                        message=verdict.get("message"))
    if work is not None:
        shape.flops = sum(work["flops"].values())
        shape.bytes = work["bytes"]
        shape.flops_by_class = dict(work["flops"])
        shape.bytes_read = work.get("bytes_read")
        shape.bytes_written = work.get("bytes_written")
        shape.flops_source = work.get("flops_source")
        shape.bytes_source = work.get("bytes_source")
        shape.sol_ms = scoring.sol_ms(work["flops"], work["bytes"], info.peaks)
        shape.sol_measured_ms = scoring.sol_ms(work["flops"], work["bytes"], info.peaks_measured)
        shape.bound = scoring.bound(work["flops"], work["bytes"], info.peaks)
    timing = outcome.timings.get((label, shape_id))
    if timing is not None and shape.status is Status.PASS:
        _apply_timing(shape, timing)
    return shape


def _apply_timing(shape: ShapeResult, timing: dict) -> None:
    if timing.get("error"):
        shape.status = Status.RUNTIME_ERROR
        shape.message = f"timing failed: {timing['error']}"
        return
    shape.time_ms = timing["median_ms"]
    shape.timing_method = timing["method"]
    shape.launch_bound = timing.get("launch_bound")
    shape.timing_calls_per_sample = timing.get("calls_per_sample")
    shape.timing_mean_ms = timing["mean_ms"]
    shape.timing_reps = timing["reps"]
    shape.timing_rse = timing["rse"]
    shape.timing_judge_ms = timing.get("judge_ms")
    shape.roofline_fraction = scoring.fraction(shape.sol_ms, shape.time_ms)
    shape.roofline_fraction_measured = scoring.fraction(shape.sol_measured_ms, shape.time_ms)
    if timing.get("problem"):
        shape.status = Status.SUSPICIOUS
        shape.message = timing["problem"]["message"]
    elif shape.roofline_fraction is not None and shape.roofline_fraction > BEYOND_ROOFLINE:
        shape.status = Status.SUSPICIOUS
        shape.message = (f"measured {shape.time_ms:.4g} ms is faster than the hardware floor "
                         f"{shape.sol_ms:.4g} ms (fraction {shape.roofline_fraction:.2f})")


def _shape_findings(outcome: JobOutcome, label: str, shape_id: str) -> list[Finding]:
    verdict = outcome.verdicts.get((label, shape_id)) or outcome.verdicts.get((label, "*")) or {}
    findings = [Finding(FindingKind(f["kind"]), f["message"], f.get("file"), f.get("line"),
                        shape_id) for f in verdict.get("findings", [])]
    timing = outcome.timings.get((label, shape_id)) or {}
    if timing.get("problem"):
        findings.append(Finding(FindingKind(timing["problem"]["kind"]),
                                timing["problem"]["message"], shape_id=shape_id))
    elif timing.get("error"):
        findings.append(Finding(FindingKind.RUNTIME_ERROR, f"timing failed: {timing['error']}",
                                shape_id=shape_id))
    return findings


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, result = set(), []
    for finding in findings:
        key = (finding.kind, finding.message, finding.file, finding.line)
        if key not in seen:
            seen.add(key)
            result.append(finding)
    return result


def build_report(info: DeviceInfo, ops: list[OpResult], repo: RepoSpec, notes: list[str],
                 timed: bool) -> Report:
    _mark_beyond_roofline(ops)
    raw = {op.name: _importance(repo, op.name) for op in ops}
    for op, weight in zip(ops, scoring.normalized_importance(raw).values(), strict=True):
        op.importance = weight
    notes = list(notes)
    if not timed:
        notes.append("No GPU timing on this machine: correctness, fallback and anti-cheat checks "
                     "ran, but no roofline fraction was measured and there is no score.")
    elif info.peaks is None:
        notes.append(f"No datasheet peaks for {info.name}: run `atrex calibrate` for a roofline.")
    stakes = [op.gpu_hours_at_stake for op in ops if op.gpu_hours_at_stake is not None]
    return Report(
        device=info, ops=ops, timing_available=timed,
        score=scoring.repo_score(ops) if timed else None,
        score_measured=scoring.repo_score(ops, "score_measured") if timed else None,
        gpu_hours_at_stake=sum(stakes) if timed and stakes else None,
        notes=notes, repo=str(repo.root), created_at=dt.datetime.now(dt.UTC).isoformat(
            timespec="seconds"), tool_version=__version__)


def _mark_beyond_roofline(ops: list[OpResult]) -> None:
    for op in ops:
        for shape in op.shapes:
            if shape.status is Status.SUSPICIOUS and shape.message and "hardware floor" in \
                    shape.message:
                op.findings.append(Finding(FindingKind.BEYOND_ROOFLINE, shape.message,
                                           shape_id=shape.id))
        op.status = worst_status(s.status for s in op.shapes)
        if op.status is not Status.PASS:
            op.score = 0.0 if op.score is not None else op.score
            op.gpu_hours_at_stake = None


def _importance(repo: RepoSpec, name: str) -> float | None:
    override = repo.config.ops.get(name)
    if override and override.weight is not None:
        return override.weight
    return repo.op(name).importance
