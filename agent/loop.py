"""The optimization loop for one operator (DESIGN §5).

baseline -> profile -> retrieve -> propose -> verify + time against the incumbent (one runner
worker, interleaved) -> accept only a significant gain -> record; after ``dropout_after`` rounds
without a gain, optimization dropout hides half the attempt memory and the incumbent is re-
profiled. Stops at the target roofline fraction, at a budget (iterations, GPU-minutes, tokens), or
when no proposer has anything left. Ends with a final interleaved before/after measurement of
baseline and incumbent, which is what gets published.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from atrex.runner.evaluate import EvalOptions, shared_session
from atrex.runner.model import DeviceInfo, Report
from atrex.runner.repo import RepoSpec, load_repo

from . import kb as kbmod
from .config import OptimizeConfig, agent_table
from .decision import Decision, decide
from .measure import CandidateFile, Evaluator, GpuClock, Measurement, Timer, source_sha
from .memory import AttemptMemory, MemoryItem
from .profiling import Profile, Profiler
from .progress import Display, NullDisplay
from .proposers import (
    AutotuneProposer,
    KbProposer,
    LlmProposer,
    Proposal,
    ProposalContext,
    TokenBudget,
)
from .records import Attempt, AttemptLog, unified_diff
from .workspace import Workspace

INCUMBENT = "incumbent"


@dataclass
class Incumbent:
    file: CandidateFile
    measurement: Measurement
    attempt: int  # the attempt that produced it (0: baseline)

    @property
    def verified(self) -> bool:
        return self.measurement.passed


@dataclass
class OptimizeResult:
    op: str
    out_dir: Path
    stop_reason: str
    baseline_source: str
    kernel_source: str
    before: Measurement
    after: Measurement
    improved: bool
    final_decision: Decision
    attempts: list[Attempt]
    device: DeviceInfo | None
    reports: dict[str, Report] = field(default_factory=dict)
    gpu_seconds: float = 0.0
    tokens: int = 0
    kernel_path: Path | None = None  # the operator's kernel file in the repository

    def summary(self) -> dict:
        return {
            "op": self.op, "stop_reason": self.stop_reason, "improved": self.improved,
            "final_decision": self.final_decision.reason, "gain": self.final_decision.gain,
            "before": self.before.to_dict(), "after": self.after.to_dict(),
            "attempts": len(self.attempts) - 1, "accepted": [
                a.attempt for a in self.attempts if a.accepted and a.iteration > 0],
            "dropouts": [a.dropout for a in self.attempts if a.dropout],
            "gpu_seconds": round(self.gpu_seconds, 1), "tokens": self.tokens,
            "device": _device_dict(self.device)}


def _device_dict(info: DeviceInfo | None) -> dict | None:
    if info is None:
        return None
    return {k: getattr(info, k) for k in ("kind", "name", "gpu_key", "uuid", "driver", "cuda",
                                          "torch", "triton", "python", "sm_clock_mhz",
                                          "mem_clock_mhz")}


class OptimizeLoop:
    def __init__(self, repo: RepoSpec, config: OptimizeConfig, out_dir: Path,
                 timer: Timer | None = None, display: Display | None = None,
                 llm_client_factory=None):
        config.check()
        self.repo, self.config = repo, config
        self.op = repo.op(config.op)
        self.display = display or NullDisplay()
        self.out_dir = Path(out_dir).resolve()
        self.workspace = Workspace(self.out_dir, self.op)
        self.log = AttemptLog(self.out_dir / "attempts.jsonl")
        self.clock = GpuClock(limit_s=config.gpu_minutes * 60.0)
        self.tokens = TokenBudget(config.max_tokens)
        options = EvalOptions(device=config.device, device_index=config.device_index,
                              trials=config.trials, timing_policy=self._timing_policy())
        self.device = options.resolved_device()
        options.device = self.device
        self.evaluator = Evaluator(repo, self.op, options, self.clock, timer,
                                   progress=self.display.progress)
        self.profiler = Profiler(self.op, self.device, config.ncu, self.clock,
                                 config.device_index)
        self.memory = AttemptMemory()
        self.rng = random.Random(config.seed)
        self.kb = kbmod.load_kb(config.kb_root)
        families = dict(agent_table(repo.config.agent, repo.config.path).get("families", {}))
        families.update(config.families)
        self.family = kbmod.family_of(self.op.name, self.kb, families)
        self.proposers = self._proposers(llm_client_factory)
        self.next_proposer = 0
        self.attempt_no = 0
        self._kb_ids: list[str] = []
        self.device_info: DeviceInfo | None = None

    def _timing_policy(self) -> dict:
        limit = self.config.timing_max_seconds
        return {"max_seconds": limit} if limit else {}

    def _proposers(self, llm_client_factory) -> list:
        built = []
        for name in self.config.proposers:
            if name == "llm":
                kwargs = {"client_factory": llm_client_factory} if llm_client_factory else {}
                built.append(LlmProposer(self.config.llm, self.tokens, **kwargs))
            elif name == "autotune":
                built.append(AutotuneProposer(self.config.autotune_batch))
            elif name == "kb":
                built.append(KbProposer())
        return built

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> OptimizeResult:
        with shared_session(self.evaluator.options) as options:
            self.evaluator.options = options
            return self._run()

    def _run(self) -> OptimizeResult:
        baseline_file = CandidateFile(
            source=(self.op.path / self.op.kernel_file).read_text(),
            kernel=self.op.path / self.op.kernel_file, root=self.repo.root)
        self.incumbent = self._baseline(baseline_file)
        self.profile = self.profiler.profile(self.incumbent.file, self.incumbent.measurement)
        self._amend_baseline_profile()
        stop, stalls, iteration = None, 0, 0
        while stop is None:
            stop = self._stop_reason(iteration)
            if stop is not None:
                break
            iteration += 1
            outcome = self._iteration(iteration)
            if outcome is None:
                stop = "no proposer has anything left to try"
                break
            stalls = 0 if outcome else stalls + 1
            if stalls >= self.config.dropout_after:
                self._dropout(stalls)
                stalls = 0
        return self._finish(baseline_file, stop)

    def _baseline(self, baseline: CandidateFile) -> Incumbent:
        measurements, reports = self.evaluator.measure({INCUMBENT: baseline})
        self.device_info = reports[INCUMBENT].device
        m = measurements[INCUMBENT]
        attempt = Attempt(
            iteration=0, attempt=0, proposer="baseline", status=m.status, accepted=m.passed,
            reason="baseline: the starting incumbent" if m.passed else
            f"baseline is not verified ({m.status}); the first verified candidate replaces it",
            summary=f"baseline {self.op.kernel_file}", roofline_fraction=m.roofline_fraction,
            own_kernel_share=m.own_kernel_share, time_ms=m.weighted_time_ms,
            timing_source=m.timing_source, candidate_sha=baseline.sha,
            incumbent_sha=baseline.sha, message=m.message, shapes=_shapes(m),
            gpu_seconds=round(self.clock.spent_s, 2), meta={"config": self._config_record()})
        self._baseline_attempt = attempt
        self.memory.add(MemoryItem(0, 0, "baseline", m.status, m.passed, attempt.reason,
                                   attempt.summary, baseline.sha, baseline.sha), baseline=True)
        return Incumbent(baseline, m, 0)

    def _amend_baseline_profile(self) -> None:
        self._baseline_attempt.bottleneck = self.profile.bottleneck
        self._baseline_attempt.meta["profile"] = self.profile.to_dict()
        self.log.write(self._baseline_attempt)
        self.display.baseline(self._baseline_attempt, self.incumbent.measurement, self.profile)

    def _config_record(self) -> dict:
        c = self.config
        return {"op": c.op, "proposers": c.proposers, "max_iters": c.max_iters,
                "gpu_minutes": c.gpu_minutes, "max_tokens": c.max_tokens,
                "target_fraction": c.target_fraction, "dropout_after": c.dropout_after,
                "seed": c.seed, "device": self.device, "ncu": c.ncu,
                "autotune_batch": c.autotune_batch, "family": self.family,
                "model": c.llm.model if c.llm else None,
                "acceptance": {"min_gain": c.rule.min_gain, "sigmas": c.rule.sigmas,
                               "beyond_roofline": c.rule.beyond_roofline}}

    def _stop_reason(self, iteration: int) -> str | None:
        fraction = self.incumbent.measurement.roofline_fraction
        if self.incumbent.verified and fraction is not None and \
                fraction >= self.config.target_fraction:
            return f"target reached: roofline fraction {fraction:.3f} >= " \
                   f"{self.config.target_fraction:.2f}"
        if iteration >= self.config.max_iters:
            return f"iteration budget spent ({self.config.max_iters})"
        # one more round and the final before/after measurement must fit in the GPU budget
        needed = 2 * self.clock.typical_evaluation_s()
        if self.clock.left_s <= needed:
            return f"GPU budget spent ({self.clock.spent_s / 60:.1f} of " \
                   f"{self.config.gpu_minutes:g} min, a round takes ~{needed / 120:.1f} min)"
        return None

    # -- one round -------------------------------------------------------------------------------
    def _iteration(self, iteration: int) -> bool | None:
        """True if a candidate was accepted, False if not, None if nothing could be proposed."""
        ctx = self._context(iteration)
        proposals = self._propose(ctx)
        if proposals is None:
            return None
        attempts, to_measure = [], {}
        for proposal in proposals:
            self.attempt_no += 1
            attempt, candidate = self._screen(iteration, proposal, ctx)
            attempts.append((attempt, proposal, candidate))
            if candidate is not None:
                to_measure[f"attempt-{attempt.attempt}"] = candidate
        accepted = self._measure_round(attempts, to_measure) if to_measure else None
        if accepted is not None:
            self._promote(*accepted)
        for attempt, proposal, _ in attempts:
            self._remember(attempt, proposal)
            self.log.write(attempt)
            self.display.attempt(attempt, self.incumbent.measurement)
        return accepted is not None

    def _context(self, iteration: int) -> ProposalContext:
        dtype = self.op.dtype
        gpu = (self.device_info.gpu_key if self.device_info else None) or self.repo.config.gpu
        forward = list(self.op.forward_params)
        notes = kbmod.retrieve(self.kb, self.family, dtype, gpu, self.profile.bottleneck,
                               kind="note", limit=3)
        kernels = kbmod.retrieve(self.kb, self.family, dtype, gpu, self.profile.bottleneck,
                                 forward=forward, kind="kernel", limit=3)
        reference = (self.op.path / "reference.py").read_text()
        return ProposalContext(
            op=self.op, family=self.family, dtype=dtype, gpu=gpu, reference_source=reference,
            incumbent_source=self.incumbent.file.source, incumbent_sha=self.incumbent.file.sha,
            incumbent=self.incumbent.measurement, profile=self.profile,
            memory=self.memory.visible(), kb_notes=notes, kb_kernels=kernels,
            iteration=iteration, rng=self.rng, target_fraction=self.config.target_fraction)

    def _propose(self, ctx: ProposalContext) -> list[Proposal] | None:
        """Round-robin over the proposers, skipping those with nothing left right now."""
        count = len(self.proposers)
        for offset in range(count):
            proposer = self.proposers[(self.next_proposer + offset) % count]
            proposals = proposer.propose(ctx)
            if proposals:
                self.next_proposer = (self.next_proposer + offset + 1) % count
                self._kb_ids = [h.entry.id for h in ctx.kb_notes + ctx.kb_kernels]
                return proposals
        return None

    def _screen(self, iteration: int, proposal: Proposal, ctx: ProposalContext):
        """The attempt record and, if it should be measured, the candidate file."""
        attempt = Attempt(iteration=iteration, attempt=self.attempt_no,
                          proposer=proposal.proposer, status="", accepted=False, reason="",
                          summary=proposal.summary, bottleneck=ctx.profile.bottleneck,
                          kb_entries=list(self._kb_ids), tokens=proposal.tokens,
                          incumbent_sha=ctx.incumbent_sha, meta=dict(proposal.meta))
        if proposal.source is None:
            attempt.status = proposal.failure_status or "proposer_error"
            attempt.reason = proposal.failure_reason or "the proposer failed"
            return attempt, None
        attempt.candidate_sha = source_sha(proposal.source)
        attempt.diff = unified_diff(ctx.incumbent_source, proposal.source)
        if attempt.candidate_sha == ctx.incumbent_sha:
            attempt.status, attempt.reason = "duplicate", "identical to the incumbent; not run"
            return attempt, None
        earlier = self.memory.tried(ctx.incumbent_sha, attempt.candidate_sha)
        if earlier is not None:
            attempt.status = "duplicate"
            attempt.reason = f"identical to attempt {earlier.attempt} against the same " \
                             "incumbent; not run again"
            return attempt, None
        return attempt, self.workspace.write_candidate(attempt.attempt, proposal.source)

    def _measure_round(self, attempts, to_measure: dict[str, CandidateFile]):
        spent_before = self.clock.spent_s
        plan = {INCUMBENT: self.incumbent.file, **to_measure}
        measurements, _ = self.evaluator.measure(plan)
        seconds = round(self.clock.spent_s - spent_before, 2)
        fresh = measurements[INCUMBENT]
        if self.incumbent.verified and not fresh.passed:
            self.display.note(f"the incumbent failed re-verification ({fresh.status}: "
                              f"{fresh.message}); it is no longer treated as verified")
        self.incumbent.measurement = fresh
        baseline_for_decision = fresh if fresh.passed else None
        decided = []
        for attempt, _, candidate in attempts:
            if candidate is None:
                continue
            m = measurements[f"attempt-{attempt.attempt}"]
            decision = decide(m, baseline_for_decision, self.config.rule)
            _fill(attempt, m, decision, fresh, seconds)
            decided.append((attempt, candidate, m, decision))
        return _pick_best(decided)

    def _promote(self, attempt: Attempt, candidate: CandidateFile, m: Measurement) -> None:
        attempt.accepted = True
        self.incumbent = Incumbent(candidate, m, attempt.attempt)
        self.profile = self.profiler.profile(candidate, m)
        attempt.meta["new_profile"] = self.profile.to_dict()

    def _remember(self, attempt: Attempt, proposal: Proposal) -> None:
        self.memory.add(MemoryItem(
            attempt=attempt.attempt, iteration=attempt.iteration, proposer=attempt.proposer,
            status=attempt.status, accepted=attempt.accepted, reason=attempt.reason,
            summary=attempt.summary, incumbent_sha=attempt.incumbent_sha,
            source_sha=attempt.candidate_sha, gain=attempt.gain, meta=dict(proposal.meta)))

    def _dropout(self, stalls: int) -> None:
        event = self.memory.dropout(self.rng, self.config.seed, stalls)
        self.profile = self.profiler.profile(self.incumbent.file, self.incumbent.measurement)
        record = event.to_dict()
        record["profile"] = self.profile.to_dict()
        last = self.log.attempts[-1]
        last.dropout = record
        self.log.rewrite()
        self.display.note(f"dropout after {stalls} rounds without a gain: hid attempts "
                          f"{event.hidden_attempts}, re-profiled: {self.profile.bottleneck}")

    # -- the end ---------------------------------------------------------------------------------
    def _finish(self, baseline: CandidateFile, stop: str) -> OptimizeResult:
        final = self.incumbent
        if final.file.sha == baseline.sha:
            before = after = final.measurement
            decision = Decision(False, "no candidate beat the baseline; the kernel is unchanged")
            reports = {}
        else:
            measured, reports = self.evaluator.measure({"before": baseline, "after": final.file})
            before, after = measured["before"], measured["after"]
            decision = decide(after, before if before.passed else None, self.config.rule)
        improved = decision.accepted and final.file.sha != baseline.sha
        source = final.file.source if improved else baseline.source
        self.workspace.write_final(source)
        result = OptimizeResult(
            op=self.op.name, out_dir=self.out_dir, stop_reason=stop,
            baseline_source=baseline.source, kernel_source=source,
            before=before, after=after, improved=improved,
            final_decision=decision, attempts=list(self.log.attempts),
            device=self.device_info, reports=reports, gpu_seconds=self.clock.spent_s,
            tokens=self.tokens.used, kernel_path=self.op.path / self.op.kernel_file)
        self._write_outputs(result, reports)
        self.display.finish(result)
        return result

    def _write_outputs(self, result: OptimizeResult, reports: dict[str, Report]) -> None:
        for label, report in reports.items():
            (self.out_dir / f"report_{label}.json").write_text(report.to_json())
        (self.out_dir / "summary.json").write_text(json.dumps(result.summary(), indent=2,
                                                              default=str))


def _fill(attempt: Attempt, m: Measurement, decision: Decision, incumbent: Measurement,
          seconds: float) -> None:
    attempt.status = decision.status or m.status
    attempt.reason = decision.reason
    attempt.roofline_fraction = m.roofline_fraction
    attempt.own_kernel_share = m.own_kernel_share
    attempt.time_ms = m.weighted_time_ms
    attempt.incumbent_time_ms = incumbent.weighted_time_ms
    attempt.gain = decision.gain
    attempt.timing_source = m.timing_source
    attempt.message = m.message
    attempt.shapes = _shapes(m)
    attempt.gpu_seconds = seconds
    attempt.meta["decision_accepts"] = decision.accepted


def _pick_best(decided):
    """The fastest of the candidates the rule accepts; the others are told why they lost."""
    winners = [d for d in decided if d[3].accepted]
    if not winners:
        return None
    best = min(winners, key=lambda d: d[2].weighted_time_ms if d[2].weighted_time_ms is not None
               else float("inf"))
    for attempt, _, _, decision in winners:
        if attempt is not best[0]:
            attempt.reason = (f"not accepted: a significant gain ({decision.gain:.1%}), but "
                              f"attempt {best[0].attempt} was faster in the same round")
    return best[0], best[1], best[2]


def _shapes(m: Measurement) -> list[dict]:
    return [{"id": s.id, "status": s.status, "time_ms": s.time_ms, "sol_ms": s.sol_ms,
             "roofline_fraction": s.roofline_fraction, "timing_rse": s.timing_rse,
             "timing_reps": s.timing_reps, "own_kernel_share": s.own_kernel_share,
             "message": s.message} for s in m.shapes]


def optimize(repo_path: Path | str, config: OptimizeConfig, out_dir: Path | str,
             timer: Timer | None = None, display: Display | None = None,
             llm_client_factory=None) -> OptimizeResult:
    repo = load_repo(repo_path, [config.op])
    loop = OptimizeLoop(repo, config, Path(out_dir), timer=timer, display=display,
                        llm_client_factory=llm_client_factory)
    return loop.run()


__all__ = ["OptimizeConfig", "OptimizeLoop", "OptimizeResult", "Profile", "optimize"]
