"""What the bot calls: one optimization job (``/atrex optimize`` or a scheduled run), and the
ranking of a repository's operators by GPU-hours at stake.

Independent of the bot: the bot passes a checkout, the target branch, budgets, and a
:class:`~agent.github.GitHubClient` (its App-authenticated PyGithub wrapped in
:class:`~agent.github.PyGithubClient`, or its own). Per operator: run the loop; if the final
interleaved before/after measurement shows a verified, significant gain, commit and open (or update)
that operator's single atrex PR.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from atrex.runner.evaluate import EvalOptions, evaluate_repo
from atrex.runner.model import Report, Status
from atrex.runner.repo import load_repo

from .config import OptimizeConfig, agent_table
from .github import GitHubClient
from .loop import OptimizeResult, optimize
from .measure import Timer
from .pr import PublishOutcome, PublishRequest, publish
from .prbody import before_after_table, render_body, title_for
from .progress import Display
from .proposers import LlmSettings, parse_proposers


@dataclass
class OptimizeRequest:
    checkout: Path  # the repository checkout (atrex.toml at its root, or op dirs below)
    repo_full_name: str  # owner/name
    out_dir: Path  # per-op subdirectories with kernel.py, attempts.jsonl, summary.json
    ops: list[str] = field(default_factory=list)  # empty: the top `max_ops` by GPU-hours at stake
    base_branch: str | None = None  # the PR's head branch for /atrex optimize; None: default
    trigger: str = "schedule"  # "command" or "schedule"
    pr_number: int | None = None  # the PR the command came from
    proposers: list[str] | None = None
    max_iters: int | None = None
    gpu_minutes: float | None = None
    max_tokens: int | None = None
    target_fraction: float | None = None
    llm: LlmSettings | None = None
    device: str = "auto"
    device_index: int = 0
    seed: int = 0
    max_ops: int = 1
    open_pr: bool = True
    remote: str = "origin"
    git_env: Callable[[], dict[str, str]] | None = None  # environment for git fetch/push (auth)
    pr_note: str | None = None  # an extra paragraph for the PR body (e.g. why this op)


@dataclass
class OpOutcome:
    op: str
    improved: bool = False
    stop_reason: str | None = None
    summary: dict | None = None
    pr: PublishOutcome | None = None
    out_dir: Path | None = None
    error: str | None = None
    table: str | None = None  # the before/after table of the PR body (Markdown)


@dataclass
class OptimizeOutcome:
    ops: list[OpOutcome]
    ranked: list[OpStake] = field(default_factory=list)

    @property
    def pulls(self) -> list[PublishOutcome]:
        return [o.pr for o in self.ops if o.pr is not None]


@dataclass(frozen=True)
class OpStake:
    op: str
    gpu_hours_at_stake: float | None
    score: float | None
    importance: float | None
    key: float  # the ranking key (larger: more to gain)
    basis: str  # "gpu_hours" or "importance x (1 - E_op)"


def rank_ops_by_stake(report: Report, limit: int | None = None) -> list[OpStake]:
    """Passing ops, most GPU-hours at stake first (importance x (1 - E_op) where no op has a
    GPU-hour number). Failing ops are excluded: they need a human before a speed-up."""
    passing = [op for op in report.ops if op.status is Status.PASS]
    use_hours = passing and all(op.gpu_hours_at_stake is not None for op in passing)
    ranked = []
    for op in passing:
        if use_hours:
            key, basis = op.gpu_hours_at_stake, "gpu_hours"
        else:
            key = (op.importance or 0.0) * (1.0 - (op.score or 0.0))
            basis = "importance x (1 - E_op)"
        ranked.append(OpStake(op.name, op.gpu_hours_at_stake, op.score, op.importance, key,
                              basis))
    ranked.sort(key=lambda s: (-s.key, s.op))
    return ranked[:limit] if limit is not None else ranked


def run_optimize_job(request: OptimizeRequest, github: GitHubClient | None,
                     report: Report | None = None, display: Display | None = None,
                     timer: Timer | None = None) -> OptimizeOutcome:
    """Optimize the requested ops (or the top ones by stake) and publish the winners."""
    repo = load_repo(request.checkout)
    settings = agent_table(repo.config.agent, repo.config.path)
    ranked: list[OpStake] = []
    ops = list(request.ops)
    if not ops:
        if report is None:
            report = evaluate_repo(repo, EvalOptions(device=request.device,
                                                     device_index=request.device_index))
        ranked = rank_ops_by_stake(report, request.max_ops)
        ops = [s.op for s in ranked]
    outcomes = []
    base = request.base_branch
    for op in ops:
        outcome = OpOutcome(op=op, out_dir=Path(request.out_dir) / op)
        try:
            result = optimize(request.checkout, _config(request, settings, op),
                              outcome.out_dir, timer=timer, display=display)
            outcome.improved, outcome.stop_reason = result.improved, result.stop_reason
            outcome.summary = result.summary()
            outcome.table = before_after_table(result)
            if result.improved and request.open_pr and github is not None:
                base = base or github.default_branch(request.repo_full_name)
                outcome.pr = publish(_publish_request(request, result, base), github)
        except Exception as exc:  # noqa: BLE001 - one op's failure must not stop the others
            outcome.error = f"{type(exc).__name__}: {exc}"
            outcome.summary = {"traceback": traceback.format_exc(limit=8)}
        outcomes.append(outcome)
    return OptimizeOutcome(ops=outcomes, ranked=ranked)


def _config(request: OptimizeRequest, settings: dict, op: str) -> OptimizeConfig:
    llm = request.llm
    proposers = parse_proposers(request.proposers or settings.get("proposers"), llm is not None)
    config = OptimizeConfig(op=op, proposers=proposers, device=request.device,
                            device_index=request.device_index, seed=request.seed, llm=llm)
    for attr, key in (("max_iters", "max_iters"), ("gpu_minutes", "gpu_minutes"),
                      ("max_tokens", "max_tokens"), ("target_fraction", "target"),
                      ("dropout_after", "dropout_after"), ("autotune_batch", "autotune_batch")):
        value = getattr(request, attr, None)
        value = value if value is not None else settings.get(key)
        if value is not None:
            setattr(config, attr, value)
    return config


def _publish_request(request: OptimizeRequest, result: OptimizeResult,
                     base: str) -> PublishRequest:
    gain = result.final_decision.gain
    message = (f"atrex: optimize {result.op} kernel"
               + (f" ({gain:.1%} less GPU time on the traced shape mix)" if gain else "")
               + f"\n\nVerified and timed by the atrex runner; {result.stop_reason}.")
    return PublishRequest(
        checkout=Path(request.checkout), repo_full_name=request.repo_full_name, op=result.op,
        kernel_path=result.kernel_path, kernel_source=result.kernel_source, base_branch=base,
        title=title_for(result), body=render_body(result, request.trigger, request.pr_number,
                                                  request.pr_note),
        commit_message=message, remote=request.remote, git_env=request.git_env)
