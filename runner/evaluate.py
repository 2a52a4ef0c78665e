"""Evaluating candidates and assembling the report: a pipeline of small stages.

plan (which kernels, which shapes) -> judge jobs (sandbox.run_job) -> shape results (roofline,
beyond-roofline check) -> op results (status, own-kernel share, E_op) -> report (importance, score).
`evaluate` takes several labelled candidates per operator and judges them in one judge process
(one executor process each), so base and head (or incumbent and proposal) are timed interleaved
on the same GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import __version__, astscan, scoring
from .config import RepoConfig
from .contract.graphplan import GRAPH_CALLS
from .errors import FormatError
from .launch import Launcher, choose_launcher
from .memory import default_budget_bytes
from .model import (
    DeviceInfo,
    Finding,
    FindingKind,
    FormatIssue,
    OpResult,
    Report,
    ShapeResult,
    Status,
    WorkSource,
    worst_status,
)
from .peaks import detect_device
from .repo import OpProblem, OpSpec, RepoSpec
from .sandbox import CandidateRef, JobOutcome, WorkerJob, device_lock, run_job, scrubbed_env

# A measured time this far under the datasheet floor is not physics: something skipped the work.
BEYOND_ROOFLINE = 1.05

ProgressFn = Callable[[str, str, str | None], None]  # (op, shape id, candidate label)
# Called after every operator with the reports so far: a caller can keep finished work on disk
# whatever happens to the rest of the run.
PartialFn = Callable[[dict[str, Report]], None]


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
    max_shapes: int | None = None  # per op, only the N shapes with the fewest input bytes
    # CPU runs skip a shape whose estimated memory exceeds this; None: half of this machine's
    # memory (runner/memory.py). GPU runs have no budget: the device's own OOM is a status.
    memory_budget_bytes: int | None = None

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def budget_for(self, device: str) -> int | None:
        if device != "cpu":
            return None
        return self.memory_budget_bytes or default_budget_bytes()


def evaluate_repo(repo: RepoSpec, options: EvalOptions, progress: ProgressFn | None = None,
                  label: str = "head", on_partial: PartialFn | None = None) -> Report:
    plan = {op.name: [CandidateRef(label, op.path / op.kernel_file, repo.root)] for op in repo.ops}
    return evaluate(repo, plan, options, progress, on_partial, labels=[label])[label]


def evaluate(repo: RepoSpec, plan: dict[str, list[CandidateRef]], options: EvalOptions,
             progress: ProgressFn | None = None, on_partial: PartialFn | None = None,
             labels: list[str] | None = None) -> dict[str, Report]:
    """One report per candidate label; every op's candidates share one judge and one GPU lock.
    Operators the loader could not read (repo.problems) are in every report as `format_error`."""
    device = options.resolved_device()
    info = detect_device(device, options.device_index, repo.config.gpu)
    launcher = options.launcher or _launcher(options.sandbox)
    info.sandbox = launcher.name
    labels = list(dict.fromkeys([*(labels or []),
                                 *(c.label for cands in plan.values() for c in cands)]))
    run = _Run(repo, plan, device, options, info, progress, on_partial, per_label={
        label: [problem_result(p) for p in repo.problems] for label in labels})
    run.publish()
    with tempfile.TemporaryDirectory(prefix="atrex-run-") as scratch:
        env = scrubbed_env(device, options.device_index, Path(scratch))
        with launcher.session(device, env, Path(scratch)) as run.launcher:
            for op in repo.ops:
                run.evaluate_op(op)
    return run.reports()


@contextlib.contextmanager
def shared_session(options: EvalOptions) -> Iterator[EvalOptions]:
    """Options for several evaluations in a row (the agent's attempts) on one launcher session:
    on a CPU run one zygote serves them all, instead of each evaluation starting its own and
    importing torch again. Nothing of a candidate is shared: the zygote runs no candidate code,
    and every judge and executor is a fresh fork of it with its evaluation's own environment."""
    device = options.resolved_device()
    launcher = options.launcher or _launcher(options.sandbox)
    with tempfile.TemporaryDirectory(prefix="atrex-session-") as scratch:
        env = scrubbed_env(device, options.device_index, Path(scratch))
        with launcher.session(device, env, Path(scratch)) as held:
            yield dataclasses.replace(options, launcher=held)


@dataclass
class _Run:
    """One evaluation in progress: what it judges, where, and what it has found so far."""

    repo: RepoSpec
    plan: dict[str, list[CandidateRef]]
    device: str
    options: EvalOptions
    info: DeviceInfo
    progress: ProgressFn | None
    on_partial: PartialFn | None
    per_label: dict[str, list[OpResult]]
    notes: list[str] = field(default_factory=list)
    launcher: Launcher | None = None

    def reports(self) -> dict[str, Report]:
        timed = self.device == "cuda" and self.options.time
        return {label: build_report(self.info, _in_repo_order(self.repo, results), self.repo,
                                    self.notes, timed)
                for label, results in self.per_label.items()}

    def publish(self) -> None:
        if self.on_partial:
            self.on_partial(self.reports())

    def evaluate_op(self, op: OpSpec) -> None:
        candidates = self.plan.get(op.name)
        if not candidates:
            return
        shape_ids = [s.id for s in op.shapes if self.device in s.targets]
        if not shape_ids:
            self.notes.append(f"{op.name}: no shape targets {self.device}; not evaluated")
            return
        job = _job(self.repo.config, op, candidates, shape_ids, self.device, self.options,
                   self.info)
        job.config_path = str(self.repo.config.path or self.repo.root / "atrex.toml")
        progress = self.progress
        on_progress = (lambda shape, label: progress(op.name, shape, label)) \
            if progress else None
        with device_lock(self.device, self.options.device_index):
            outcome = run_job(job, on_progress, self.launcher)
        self.notes += _selection_notes(op, self.options, shape_ids, outcome)
        _record_confinement(self.info, outcome.landlock_abi.values(),
                            outcome.hidden_paths.values())
        for cand in candidates:
            self.per_label[cand.label].append(op_result(
                op, cand, outcome.shape_ids(shape_ids), outcome, self.info, self.repo.root))
        self.publish()


def problem_result(problem: OpProblem) -> OpResult:
    error = problem.error
    return OpResult(name=problem.name, status=Status.FORMAT_ERROR,
                    format_error=FormatIssue(error.path, error.field, error.message))


def _in_repo_order(repo: RepoSpec, ops: list[OpResult]) -> list[OpResult]:
    dirs = {op.name: op.dir for op in repo.ops} | {p.name: p.dir for p in repo.problems}
    return sorted(ops, key=lambda op: dirs.get(op.name, op.name))


def _selection_notes(op: OpSpec, options: EvalOptions, shape_ids: list[str], outcome) -> list[str]:
    kept = outcome.shape_ids(shape_ids)
    notes = []
    if len(kept) < len(shape_ids):
        notes.append(f"{op.name}: {len(kept)} of {len(shape_ids)} shapes evaluated, the "
                     f"{options.max_shapes} with the fewest input bytes (--max-shapes)")
    if outcome.skipped:
        notes.append(f"{op.name}: {len(outcome.skipped)} shape(s) skipped over the CPU memory "
                     f"budget: {', '.join(outcome.skipped)}")
    return notes


def _record_confinement(info: DeviceInfo, abis, hidden) -> None:
    """Fold one judge's executors' Landlock ABIs into the run's (confined only if all were) and
    the secret paths they hid from reads (the fewest any executor hid)."""
    for abi in abis:
        info.executor_writes_confined = info.executor_writes_confined is not False and \
            abi is not None
        if abi is not None:
            info.executor_landlock_abi = min(abi, info.executor_landlock_abi or abi)
    for count in hidden:
        known = info.executor_hidden_paths
        info.executor_hidden_paths = count if known is None else min(count, known)


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
        timing_policy=options.timing_policy, max_shapes=options.max_shapes,
        memory_budget_bytes=options.budget_for(device))


def op_result(op: OpSpec, cand: CandidateRef, shape_ids: list[str], outcome: JobOutcome,
              info: DeviceInfo, repo_root: Path) -> OpResult:
    if outcome.format_error is not None:  # the judge stopped there: keep what it finished
        shape_ids = [s for s in shape_ids if (cand.label, s) in outcome.verdicts
                     or s in outcome.skipped]
    shapes = [shape_result(op, cand.label, shape_id, outcome, info) for shape_id in shape_ids]
    findings = astscan.static_findings(cand.kernel, cand.root)
    for shape in shapes:
        findings.extend(_shape_findings(outcome, cand.label, shape.id))
    shares = [s.own_kernel_share for s in shapes if s.own_kernel_share is not None]
    result = OpResult(
        name=op.name, status=worst_status(s.status for s in shapes),
        own_kernel_share=min(shares) if shares else None,
        findings=_dedupe(findings), shapes=shapes, load_wall_s=outcome.load_wall_s(cand.label))
    if outcome.format_error is not None:
        error = outcome.format_error
        result.status = Status.FORMAT_ERROR
        result.format_error = FormatIssue(error["path"], error["field"], error["message"])
    result.score = scoring.op_efficiency(shapes)
    result.score_measured = scoring.measured_efficiency(shapes) if info.peaks_measured else None
    if result.status is Status.PASS:
        result.gpu_hours_at_stake = scoring.gpu_hours_at_stake(shapes, op.trace_scale)
    return result


def shape_result(op: OpSpec, label: str, shape_id: str, outcome: JobOutcome,
                 info: DeviceInfo) -> ShapeResult:
    if shape_id in outcome.skipped:
        return ShapeResult(id=shape_id, status=Status.SKIPPED, weight=op.shape(shape_id).weight,
                           message=outcome.skipped[shape_id])
    verdict = outcome.verdicts.get((label, shape_id)) or outcome.verdicts.get((label, "*")) or {
        "status": "runtime_error", "message": "the judge produced no result for this shape"}
    work = outcome.work.get(shape_id)
    shape = ShapeResult(id=shape_id, status=Status(verdict["status"]),
                        weight=op.shape(shape_id).weight,
                        own_kernel_share=verdict.get("own_share"),
                        max_abs_error=verdict.get("max_abs_error"),
                        max_rel_error=verdict.get("max_rel_error"),
                        rel_l2_error=verdict.get("rel_l2_error"),
                        reference_max_abs_error=verdict.get("reference_max_abs_error"),
                        reference_rel_l2_error=verdict.get("reference_rel_l2_error"),
                        message=verdict.get("message"),
                        implementation=verdict.get("implementation"),
                        check_wall_s=outcome.check_wall_s(label, shape_id),
                        shape_wall_s=outcome.shape_wall_s(shape_id))
    if work is not None:
        shape.flops = sum(work["flops"].values())
        shape.bytes = work["bytes"]
        shape.flops_by_class = dict(work["flops"])
        shape.bytes_read = work.get("bytes_read")
        shape.bytes_written = work.get("bytes_written")
        shape.flops_source = WorkSource(work["flops_source"])
        shape.bytes_source = WorkSource(work["bytes_source"])
        shape.sol_ms = scoring.sol_ms(work["flops"], work["bytes"], info.peaks)
        shape.sol_measured_ms = scoring.sol_ms(work["flops"], work["bytes"], info.peaks_measured)
        shape.bound = scoring.bound(work["flops"], work["bytes"], info.peaks)
        shape.hard_floor_ms = scoring.hard_floor_ms(work["flops"], work["bytes"], info.peaks)
    timing = outcome.timings.get((label, shape_id))
    if timing is not None and shape.status is Status.PASS:
        _apply_timing(shape, timing)
        _apply_launch_floor(shape, info.launch_floor_ms)
    return shape


def _apply_launch_floor(shape: ShapeResult, floor_ms: float | None) -> None:
    """A launch-bound shape's time against max(SOL, the measured launch floor): 1.0 means as fast
    as one kernel launch per call can be, however far below that the roofline floor is."""
    if not shape.launch_bound or floor_ms is None or shape.time_ms is None:
        return
    shape.launch_floor_ms = floor_ms
    shape.launch_floor_fraction = scoring.fraction(max(shape.sol_ms or 0.0, floor_ms),
                                                   shape.time_ms)


def _apply_timing(shape: ShapeResult, timing: dict) -> None:
    if timing.get("error"):
        suspicious = bool(timing.get("problem"))  # the executor broke the contract while timed
        shape.status = Status.SUSPICIOUS if suspicious else Status.RUNTIME_ERROR
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
    shape.timing_hold_cycles = timing.get("hold_cycles")
    shape.timing_enqueue_ms = timing.get("enqueue_ms")
    shape.timing_new_values_ms = timing.get("new_values_ms")
    shape.timing_spread = timing.get("spread")
    shape.timing_note = _timing_note(timing)
    _apply_clocks(shape, timing.get("clocks"))
    shape.roofline_fraction = scoring.fraction(shape.sol_ms, shape.time_ms)
    shape.roofline_fraction_measured = scoring.fraction(shape.sol_measured_ms, shape.time_ms)
    if timing.get("problem"):
        shape.status = Status.SUSPICIOUS
        shape.message = timing["problem"]["message"]
    elif scoring.beyond_hardware(shape, BEYOND_ROOFLINE):
        shape.status = Status.SUSPICIOUS
        floor = shape.hard_floor_ms if shape.hard_floor_ms is not None else shape.sol_ms
        shape.message = (f"measured {shape.time_ms:.4g} ms is faster than the hardware floor "
                         f"{floor:.4g} ms (fraction {shape.roofline_fraction:.2f})")
    elif shape.roofline_fraction is not None and shape.roofline_fraction > BEYOND_ROOFLINE:
        shape.message = (f"faster than T_SOL {shape.sol_ms:.4g} ms (fraction "
                         f"{shape.roofline_fraction:.2f}) but not than the bytes and tensor-core "
                         f"work ({shape.hard_floor_ms:.4g} ms): the kernel did the reference's "
                         "CUDA-core work at a higher rate than counted (a multiply-and-sum as "
                         "matmuls, a cheaper formula); see docs/roofline.md")


def _apply_clocks(shape: ShapeResult, clocks: dict | None) -> None:
    """The card's clocks while the shape was timed (runner/judge/clocks.py ClockSummary)."""
    if not clocks:
        return
    shape.timing_sm_clock_mhz = clocks["sm_clock_median_mhz"]
    shape.timing_sm_clock_range_mhz = [clocks["sm_clock_min_mhz"], clocks["sm_clock_max_mhz"]]
    shape.timing_power_max_w = clocks.get("power_max_w")
    shape.timing_temperature_max_c = clocks.get("temperature_max_c")
    shape.timing_slowdowns = list(clocks.get("slowdowns") or [])


def _timing_note(timing: dict) -> str | None:
    """Why the repetitions stopped where a target was missed, and why a replay holds fewer
    calls than asked (or none)."""
    parts = [str(n) for n in timing.get("graph_notes") or []]
    plan = timing.get("graph_plan") or {}
    if timing.get("method") == "cuda_graph" and plan.get("restored"):
        parts.append("restored before every repetition: " + ", ".join(plan["restored"]))
    if timing.get("method") == "cuda_graph" and plan.get("reason") and \
            plan.get("calls", 0) < GRAPH_CALLS:
        parts.append(str(plan["reason"]))
    parts += _hold_notes(timing)
    parts += _draw_notes(timing)
    stop = timing.get("stop")
    if stop and stop != "converged":
        parts.append(str(stop))
    return "; ".join(parts) if parts else None


def _draw_notes(timing: dict) -> list[str]:
    """Where the time depends on the input values: the calls on new values (checked and timed
    after the repetitions) took a very different time from the timed draw's."""
    timed, fresh = timing.get("median_ms"), timing.get("new_values_ms")
    if not scoring.draw_dependent(timed, fresh):
        return []
    return [f"the time depends on the input values: {timed:.4g} ms a call on the timed draw, "
            f"{fresh:.4g} ms on new values (median of the checked calls), so it holds for this "
            "draw only"]


def _hold_notes(timing: dict) -> list[str]:
    """Where the call's host work outlasted the device hold of a repetition."""
    enqueue = timing.get("enqueue_ms")
    took = f" (median {enqueue:.3g} ms to enqueue a repetition)" if enqueue is not None else ""
    notes = []
    if (timing.get("retimed_batches") or 0) > 0:
        notes.append(f"timed under a device hold of {timing.get('hold_cycles', 0):,} cycles: "
                     f"the device waited for the host under the shorter ones{took}")
    waits = timing.get("host_waits") or 0
    if waits:
        notes.append(f"in {waits} of {timing.get('reps')} repetitions the device waited for the "
                     "host inside the timed region even under the longest hold (the call waits "
                     f"on the host, or its host work outlasts the hold){took}: those times "
                     "include host time")
    return notes


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
    if info.executor_writes_confined is False:
        notes.append("Candidates' file writes were not confined: this machine's kernel offers no "
                     "Landlock. They still could not read or attach to atrex's processes "
                     "(docs/threat-model.md).")
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
            finding = Finding(FindingKind.BEYOND_ROOFLINE, shape.message or "",
                              shape_id=shape.id)
            if shape.status is Status.SUSPICIOUS and shape.message and "hardware floor" in \
                    shape.message and finding not in op.findings:  # reports are rebuilt
                op.findings.append(finding)
        if op.format_error is None:
            op.status = worst_status(s.status for s in op.shapes)
        if op.status is not Status.PASS:
            op.score = 0.0 if op.score is not None else op.score
            op.gpu_hours_at_stake = None


def _importance(repo: RepoSpec, name: str) -> float | None:
    override = repo.config.ops.get(name)
    if override and override.weight is not None:
        return override.weight
    try:
        return repo.op(name).importance
    except KeyError:  # an operator that did not load: its metadata is unknown
        return None
