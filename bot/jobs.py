"""Running a claimed job: its dependencies (`Runtime`), its context, and dispatch by job kind.

A task is a function `run(ctx) -> Outcome` for one job kind, plus `give_up(ctx, error)` that reports
a job which will not be tried again. Transient errors are raised (the worker retries the job later);
errors a retry cannot fix are returned as `Outcome.failed`. Every GitHub effect a task makes is
idempotent (see `effects`), so a job re-run after a crash repeats nothing visible.

The optimize kind runs a function injected through `Runtime.optimize_runner` and the
scheduled_optimize kind one injected through `Runtime.scheduled_runner`: by default both are the
bundled agent's bridge (`atrex.bot.agent_bridge`), built by `atrex.bot.worker.build_runtime` when
the agent is installed; `ATREX_OPTIMIZE_RUNNER=module:function` names another optimize runner and
`none` turns the command off (an optimize job then fails with a comment saying the agent is not
configured).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .config import BotConfig, ConfigError
from .github import RepoApi
from .newjobs import COMMAND, EVALUATE, EVALUATE_BRANCH, OPTIMIZE, SCHEDULED
from .store import Job, SqlStore


@dataclass
class OptimizeRequest:
    """What the bot hands the agent for `/atrex optimize` on a pull request."""

    repo: str  # owner/name of the base repository
    pr: int
    head_sha: str
    head_ref: str
    head_repo: str | None  # owner/name of the head repository (a fork for fork PRs)
    base_ref: str
    ops: list[str]  # operators asked for; empty: the agent picks (the PR's changed operators)
    workdir: Path  # a git clone checked out at head_sha on branch atrex/base, origin = head repo
    requested_by: str
    device: str
    device_index: int
    github: Any  # a PyGithub `Github` client authenticated as the installation
    token: Callable[[], str]  # a current installation token (for git push over https)
    progress: Callable[[str], None]  # short progress lines; the bot shows the latest one


# returns markdown, or a mapping with "summary", "pr_url" and optionally "reaction", "prs"
OptimizeRunner = Callable[[OptimizeRequest], Any]


@dataclass
class ScheduledRequest:
    """What the bot hands the agent for a scheduled run on a repository's default branch."""

    repo: str
    default_branch: str
    head_sha: str  # the default branch's commit that was checked out
    workdir: Path  # a git clone at head_sha on branch atrex/base, origin = the repository
    out_dir: Path  # where the agent writes attempt logs and candidates
    device: str
    device_index: int
    github: Any  # a PyGithub `Github` client authenticated as the installation
    token: Callable[[], str]  # a current installation token (for git push over https)
    progress: Callable[[str], None] = lambda line: None
    # the operators an earlier attempt of this job chose (it crashed after choosing): run those
    # again instead of ranking anew, so a crash cannot make one period open more than max_prs
    choice: dict[str, Any] | None = None
    record_choice: Callable[[dict[str, Any]], None] = lambda choice: None
    # the default branch's evaluation (a runner Report, the repository's regression threshold),
    # for the history
    record_report: Callable[[Any, float], None] = lambda report, threshold: None


# returns a mapping: "prs" (opened/updated), "ranked", "chosen", "skipped", or "error"
ScheduledRunner = Callable[[ScheduledRequest], dict[str, Any]]
DISABLED = "none"  # ATREX_OPTIMIZE_RUNNER value that turns /atrex optimize off


class Lease(Protocol):
    @property
    def lost(self) -> bool: ...


@dataclass
class Runtime:
    """Everything tasks need, built once per worker process (tests build their own)."""

    config: BotConfig
    store: SqlStore
    repo_api: Callable[[int, str], RepoApi]  # (installation id, owner/name) -> RepoApi
    token: Callable[[int], str | None]  # installation id -> token for git over https
    github_client: Callable[[int], Any] = lambda _id: None
    evaluate: Callable[..., Any] | None = None  # default: runner.evaluate.evaluate
    optimize_runner: OptimizeRunner | None = None
    scheduled_runner: ScheduledRunner | None = None


@dataclass
class JobContext:
    runtime: Runtime
    job: Job
    owner: str
    lease: Lease
    gpu_index: int = 0
    _api: RepoApi | None = field(default=None, repr=False)

    @property
    def store(self) -> SqlStore:
        return self.runtime.store

    @property
    def config(self) -> BotConfig:
        return self.runtime.config

    @property
    def payload(self) -> dict[str, Any]:
        return self.job.payload

    def api(self) -> RepoApi:
        if self._api is None:
            self._api = self.runtime.repo_api(self.payload["installation_id"],
                                              self.payload["repo"])
        return self._api

    def work_dir(self) -> Path:
        return self.config.data_dir.resolve() / "work" / f"job-{self.job.id}"


@dataclass(frozen=True)
class Outcome:
    action: str  # "complete", "moved" (the task handed the job on or parked it), "failed"
    result: dict[str, Any] | None = None
    error: str | None = None

    @staticmethod
    def done(**result: Any) -> Outcome:
        return Outcome("complete", result)

    @staticmethod
    def moved() -> Outcome:
        return Outcome("moved")

    @staticmethod
    def failed(error: str) -> Outcome:
        return Outcome("failed", error=error)


@dataclass(frozen=True)
class Task:
    run: Callable[[JobContext], Outcome]
    give_up: Callable[[JobContext, str], None]


def tasks() -> Mapping[str, Task]:
    from .tasks import branch, command, evaluate, optimize, scheduled

    return {EVALUATE: Task(evaluate.run, evaluate.give_up),
            EVALUATE_BRANCH: Task(branch.run, branch.give_up),
            COMMAND: Task(command.run, command.give_up),
            OPTIMIZE: Task(optimize.run, optimize.give_up),
            SCHEDULED: Task(scheduled.run, scheduled.give_up)}


class UnknownJobKind(Exception):
    pass


class LeaseLost(Exception):
    """Another worker took this job over (this one was presumed dead): publish nothing."""


def check_lease(ctx: JobContext) -> None:
    if ctx.lease is not None and ctx.lease.lost:
        raise LeaseLost(f"job {ctx.job.id}: lease lost to another worker")


def dispatch(ctx: JobContext, registry: Mapping[str, Task] | None = None) -> Outcome:
    task = (registry or tasks()).get(ctx.job.kind)
    if task is None:
        raise UnknownJobKind(ctx.job.kind)
    return task.run(ctx)


def give_up(ctx: JobContext, error: str, registry: Mapping[str, Task] | None = None) -> None:
    task = (registry or tasks()).get(ctx.job.kind)
    if task is not None:
        task.give_up(ctx, error)


def load_optimize_runner(spec: str | None) -> OptimizeRunner | None:
    """Resolve `module:function` (ATREX_OPTIMIZE_RUNNER) at worker start, naming the setting
    (None for unset and for `none`)."""
    if not spec or spec.lower() == DISABLED:
        return None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError("ATREX_OPTIMIZE_RUNNER", f"must be module:function, got {spec!r}")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("ATREX_OPTIMIZE_RUNNER", f"cannot load {spec!r}: {exc}") from None
    if not callable(target):
        raise ConfigError("ATREX_OPTIMIZE_RUNNER", f"{spec!r} is not callable")
    return target
