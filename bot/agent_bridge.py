"""The bot's side of the agent: `/atrex optimize` and scheduled runs through `atrex.agent.api`.

`AgentBridge.optimize` is the default `Runtime.optimize_runner`: it turns the bot's
`OptimizeRequest` (a clone of the PR head, the operators, the requester) into the agent's requests,
one per operator, and the agent's outcomes into the reply posted in the PR thread.
`AgentBridge.scheduled` is `Runtime.scheduled_runner`: evaluate the default branch, rank the
operators by GPU-hours at stake, run the agent on the top ones.

- Budgets and proposers come from the repository's `atrex.toml` `[agent]` table, validated here
  (an unknown key or a wrong type is a reply naming the field). The LLM endpoint is the
  installation's (`ATREX_LLM_BASE_URL`, `ATREX_LLM_MODEL`, `OPENAI_API_KEY`), never the
  repository's: a repository cannot send the App's API key elsewhere. Without one, `llm` is dropped
  and the proposers are `autotune,kb`.
- Target branch: the PR's head branch for a command, the default branch for a schedule. One open
  atrex PR per operator: the agent updates the one it finds. An operator whose open atrex PR targets
  another branch is not run (its PR is left alone).
- Fork PRs: no branch is pushed to a fork and no PR opened; the reply carries the before/after
  table and the verified kernel as a diff for the author to apply.

Imported only when the agent is installed; `timer` is the agent's test seam (CPU only, tests only).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from atrex.agent.api import OpOutcome, OpStake, rank_ops_by_stake, run_optimize_job
from atrex.agent.api import OptimizeRequest as AgentRequest
from atrex.agent.config import OptimizeConfig, agent_table
from atrex.agent.github import GitHubClient, PyGithubClient
from atrex.agent.measure import Timer
from atrex.agent.pr import branch_for, marker_for
from atrex.agent.proposers import LlmSettings, parse_proposers
from atrex.runner.config import CONFIG_NAME
from atrex.runner.errors import FormatError
from atrex.runner.evaluate import EvalOptions, evaluate_repo
from atrex.runner.model import Report
from atrex.runner.repo import RepoSpec, load_repo

from . import agent_reply as replies
from .config import BotConfig
from .gitwork import auth_env
from .jobs import OptimizeRequest, ScheduledRequest
from .schedule import Schedule, schedule_table

log = logging.getLogger(__name__)


@dataclass
class RunPlan:
    """The validated repository settings one run uses."""

    repo: RepoSpec
    proposers: list[str]
    llm: LlmSettings | None
    gpu_minutes: float | None
    notes: list[str] = field(default_factory=list)


class ConfigProblem(Exception):
    """The repository's atrex.toml cannot be used; the message names the field."""


def config_problem(exc: FormatError, root: Path | None = None) -> ConfigProblem:
    """The error with the file relative to the checkout (no server paths in PR comments)."""
    path = Path(exc.path)
    if root is not None and path.is_absolute() and path.is_relative_to(root.resolve()):
        name = path.relative_to(root.resolve()).as_posix()
    else:
        name = path.name if path.is_absolute() else exc.path
    where = f"`{exc.field}` in `{name}`" if exc.field else f"`{name}`"
    return ConfigProblem(f"{where}: {exc.message}")


class AgentBridge:
    def __init__(self, config: BotConfig, timer: Timer | None = None,
                 run_job: Callable[..., Any] = run_optimize_job,
                 evaluate: Callable[..., Report] = evaluate_repo,
                 client: Callable[[Any], GitHubClient] = PyGithubClient):
        self.config = config
        self.timer = timer  # test seam: only tests pass one (the runner cannot time on a CPU)
        self._run_job, self._evaluate, self._client = run_job, evaluate, client

    # --- settings ------------------------------------------------------------------------

    def llm(self, repo_model: str | None) -> LlmSettings | None:
        """The installation's LLM endpoint, if it has one; the repository may pick the model."""
        c = self.config
        model = repo_model or c.llm_model
        if not (c.llm_base_url or c.llm_api_key) or not model:
            return None
        return LlmSettings(model=model, base_url=c.llm_base_url, api_key=c.llm_api_key)

    def plan(self, workdir: Path) -> RunPlan:
        """Load the repository and validate its `[agent]` table (raises ConfigProblem)."""
        try:
            repo = load_repo(workdir)
            settings = agent_table(repo.config.agent, repo.config.path or CONFIG_NAME)
        except FormatError as exc:
            raise config_problem(exc, workdir) from None
        notes = []
        llm = self.llm(settings.get("model"))
        if "base_url" in settings:
            notes.append("`agent.base_url` is ignored by the atrex App: the LLM endpoint is the "
                         "installation's, so a repository cannot redirect its API key.")
        proposers = list(settings.get("proposers") or [])
        if "llm" in proposers and llm is None:
            proposers.remove("llm")
            notes.append("The `llm` proposer was skipped: this atrex installation has no LLM "
                         "endpoint configured.")
        elif settings.get("model") and llm is None:
            notes.append("`agent.model` is set, but this atrex installation has no LLM endpoint: "
                         "the `llm` proposer does not run.")
        try:
            names = parse_proposers(proposers or None, llm is not None)
        except ValueError as exc:
            raise ConfigProblem(f"`agent.proposers` in `{CONFIG_NAME}`: {exc}") from None
        return RunPlan(repo, names, llm, self._gpu_minutes(settings, notes), notes)

    def _gpu_minutes(self, settings: dict, notes: list[str]) -> float | None:
        """The repository's budget, or the agent's default, capped by the installation."""
        cap = self.config.agent_max_gpu_minutes
        asked = settings.get("gpu_minutes")
        if asked is None:
            return cap if OptimizeConfig.__dataclass_fields__["gpu_minutes"].default > cap \
                else None
        if asked > cap:
            notes.append(f"`agent.gpu_minutes = {asked:g}` is above this installation's limit; "
                         f"the run used {cap:g} GPU-minutes per operator.")
            return cap
        return asked

    # --- /atrex optimize ---------------------------------------------------------------

    def optimize(self, request: OptimizeRequest) -> dict[str, Any]:
        header = (f"**atrex optimize** on `{request.head_sha[:12]}` (asked by "
                  f"@{request.requested_by}):")
        reply = replies.Reply(header)
        try:
            plan = self.plan(request.workdir)
        except ConfigProblem as exc:
            reply.notes.append(f"Nothing ran: {exc}")
            return _result(reply, reaction="confused", error=str(exc))
        reply.notes.extend(plan.notes)
        fork = request.head_repo != request.repo
        if fork:
            reply.notes.append(
                "This pull request comes from a fork: atrex cannot push to a fork's branch, "
                "and a pull request against the default branch would carry this PR's unmerged "
                "kernel. So nothing was pushed: a faster kernel, if found, is shown below as a "
                "diff to apply to this branch.")
        github = self._client(request.github)
        known = {op.name for op in plan.repo.ops}
        for op in request.ops:
            request.progress(f"optimizing {op}")
            if op not in known:
                reply.ops.append(replies.OpReport(op, replies.ERROR, "no such operator in this "
                                                  "repository (operators: "
                                                  + ", ".join(sorted(known)) + ")"))
                continue
            blocked = None if fork else _blocking_pull(github, request.repo, op,
                                                       request.head_ref)
            if blocked is not None:
                reply.ops.append(blocked)
                continue
            agent_request = self._agent_request(plan, request, op, publish=not fork)
            outcome = self._run_one(agent_request, github)
            reply.ops.append(op_report(outcome, plan.repo, publish=not fork))
        return _result(reply, reaction="confused" if reply.failed else "rocket")

    def _agent_request(self, plan: RunPlan, request: OptimizeRequest, op: str,
                       publish: bool) -> AgentRequest:
        return AgentRequest(
            checkout=request.workdir, repo_full_name=request.repo,
            out_dir=request.workdir.parent / "agent", ops=[op], base_branch=request.head_ref,
            trigger="command", pr_number=request.pr, proposers=plan.proposers, llm=plan.llm,
            gpu_minutes=plan.gpu_minutes, device=request.device,
            device_index=request.device_index, open_pr=publish,
            git_env=_git_env(request.workdir, request.token))

    def _run_one(self, agent_request: AgentRequest, github: GitHubClient,
                 report: Report | None = None) -> OpOutcome:
        outcome = self._run_job(agent_request, github, report=report, timer=self.timer)
        return outcome.ops[0]

    # --- scheduled runs ----------------------------------------------------------------

    def scheduled(self, request: ScheduledRequest) -> dict[str, Any]:
        """Evaluate the default branch, rank, run the agent on the top `max_prs` operators."""
        try:
            plan = self.plan(request.workdir)
            schedule = schedule_table(plan.repo.config.schedule, CONFIG_NAME)
        except FormatError as exc:
            return {"error": str(config_problem(exc)), "prs": []}
        except ConfigProblem as exc:
            return {"error": str(exc), "prs": []}
        if not schedule.enabled:
            return {"note": "the repository no longer opts in ([schedule] enabled)", "prs": []}
        github = self._client(request.github)
        report = None
        if request.choice is not None:  # an earlier attempt of this job chose (then crashed)
            choice = Choice.from_dict(request.choice)
        else:
            request.progress("evaluating the default branch")
            report = self._evaluate(plan.repo, EvalOptions(device=request.device,
                                                           device_index=request.device_index))
            request.record_report(report, plan.repo.config.regression)
            choice = choose_ops(report, schedule, lambda op: github.find_open_pull(
                request.repo, branch_for(op), marker_for(op)))
            request.record_choice(choice.to_dict())
        for line in choice.log_lines():
            log.info("schedule %s: %s", request.repo, line)
        results = {}
        for stake in choice.chosen:
            request.progress(f"optimizing {stake.op}")
            agent_request = AgentRequest(
                checkout=request.workdir, repo_full_name=request.repo, out_dir=request.out_dir,
                ops=[stake.op], base_branch=request.default_branch, trigger="schedule",
                proposers=plan.proposers, llm=plan.llm, gpu_minutes=plan.gpu_minutes,
                device=request.device, device_index=request.device_index,
                git_env=_git_env(request.workdir, request.token),
                pr_note=choice.pr_note(stake))
            results[stake.op] = op_report(self._run_one(agent_request, github, report),
                                          plan.repo, publish=True)
        return choice.result(results, plan.notes)


def _git_env(workdir: Path, token: Callable[[], str]) -> Callable[[], dict[str, str]]:
    """Git configuration (environment only) that authenticates pushes to the clone's origin."""

    def env() -> dict[str, str]:
        import git

        url = git.Repo(workdir).remote("origin").url
        return auth_env(url, token())

    return env


def _blocking_pull(github: GitHubClient, repo: str, op: str, target: str):
    existing = github.find_open_pull(repo, branch_for(op), marker_for(op))
    if existing is None or existing.base == target:
        return None
    return replies.OpReport(
        op, replies.SKIPPED, f"it already has an open atrex pull request, #{existing.number}, "
        f"into `{existing.base}`; atrex keeps one open pull request per operator and does not "
        "retarget it. Merge or close it, then ask again", pr_number=existing.number,
        pr_url=existing.url)


def op_report(outcome: OpOutcome, repo: RepoSpec, publish: bool) -> replies.OpReport:
    """What the PR thread is told about one operator's agent run."""
    summary = outcome.summary or {}
    report = replies.OpReport(outcome.op, replies.NO_GAIN, summary.get("final_decision") or "",
                              stop_reason=outcome.stop_reason, table=outcome.table,
                              injected=(summary.get("after") or {}).get("timing_source")
                              == "injected")
    if outcome.error:
        report.state, report.text, report.table = replies.ERROR, outcome.error, None
    elif outcome.pr is not None:
        pr = outcome.pr
        report.state = replies.OPENED if pr.action == "opened" else replies.UPDATED
        report.pr_number, report.pr_url, report.branch = pr.number, pr.url, pr.branch
        report.pr_title, report.base = pr.title, pr.base
        report.unchanged = pr.commit is None
    elif outcome.improved and not publish:
        report.state = replies.NOT_PUBLISHED
        report.diff = _kernel_diff(repo, outcome)
    elif outcome.improved:
        report.state, report.text = replies.ERROR, "a faster kernel was verified, but no pull " \
            "request could be opened"
    return report


def _kernel_diff(repo: RepoSpec, outcome: OpOutcome) -> str | None:
    op = repo.op(outcome.op)
    before_path = op.path / op.kernel_file
    after_path = Path(outcome.out_dir or "") / "kernel.py"
    if not after_path.is_file():
        return None
    name = before_path.resolve().relative_to(repo.root.resolve()).as_posix()
    return "".join(difflib.unified_diff(
        before_path.read_text().splitlines(keepends=True),
        after_path.read_text().splitlines(keepends=True), fromfile=f"a/{name}",
        tofile=f"b/{name}"))


def _result(reply: replies.Reply, reaction: str, error: str | None = None) -> dict[str, Any]:
    published = reply.published
    return {"summary": replies.render(reply), "reaction": reaction,
            "pr_url": published[0].pr_url if published else None,
            "prs": [{"op": o.op, "action": o.state, "number": o.pr_number, "url": o.pr_url}
                    for o in published],
            "ops": {o.op: o.state for o in reply.ops}, "error": error}


# --- which operators a scheduled run takes ------------------------------------------------


@dataclass
class Choice:
    ranked: list[OpStake]
    chosen: list[OpStake]
    skipped: dict[str, str]  # op -> why it was passed over
    timed: bool  # GPU-hours at stake were measured (a GPU); else ranked by importance
    max_prs: int

    def to_dict(self) -> dict[str, Any]:
        return {"ranked": [asdict(s) for s in self.ranked],
                "chosen": [s.op for s in self.chosen], "skipped": dict(self.skipped),
                "timed": self.timed, "max_prs": self.max_prs}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Choice:
        ranked = [OpStake(**s) for s in data["ranked"]]
        chosen = [s for s in ranked if s.op in data["chosen"]]
        return cls(ranked, chosen, dict(data["skipped"]), data["timed"], data["max_prs"])

    @property
    def basis(self) -> str:
        if self.timed:
            return "GPU-hours at stake"
        return ("importance (metadata.json) x (1 - E_op): GPU-hours at stake are unknown "
                "because nothing was timed on this machine (no GPU)")

    def log_lines(self) -> list[str]:
        order = ", ".join(f"{s.op} ({s.key:.3g})" for s in self.ranked) or "no passing operator"
        lines = [f"ranked by {self.basis}: {order}"]
        lines += [f"skipped {op}: {why}" for op, why in self.skipped.items()]
        lines.append("chosen: " + (", ".join(s.op for s in self.chosen) or "none")
                     + f" (max_prs = {self.max_prs})")
        return lines

    def pr_note(self, stake: OpStake) -> str:
        rank = [s.op for s in self.ranked].index(stake.op) + 1
        if self.timed:
            why = f"{stake.gpu_hours_at_stake:.3g} GPU-hours at stake (per traced call mix)"
        else:
            why = (f"importance {stake.importance or 0:.3g}; GPU-hours at stake are unknown "
                   "because the scheduled evaluation ran without a GPU, so operators were ranked "
                   "by importance (metadata.json)")
        return (f"The schedule chose `{stake.op}`: rank {rank} of {len(self.ranked)} passing "
                f"operators ({why}).")

    def result(self, outcomes: dict[str, replies.OpReport], notes: list[str]) -> dict[str, Any]:
        prs = [{"op": op, "action": o.state, "number": o.pr_number, "url": o.pr_url}
               for op, o in outcomes.items() if o.state in (replies.OPENED, replies.UPDATED)]
        return {"basis": self.basis, "ranked": [s.op for s in self.ranked],
                "chosen": [s.op for s in self.chosen], "skipped": self.skipped, "prs": prs,
                "ops": {op: {"state": o.state, "text": o.text, "stop_reason": o.stop_reason}
                        for op, o in outcomes.items()}, "notes": notes}


def choose_ops(report: Report, schedule: Schedule,
               open_pull: Callable[[str], Any]) -> Choice:
    """The top operators by stake that the schedule allows and that have no open atrex PR."""
    ranked = rank_ops_by_stake(report)
    timed = bool(ranked) and all(s.basis == "gpu_hours" for s in ranked)
    chosen, skipped = [], {}
    for stake in ranked:
        if len(chosen) >= schedule.max_prs:
            break
        if not schedule.allows(stake.op):
            skipped[stake.op] = "not in [schedule] ops"
            continue
        existing = open_pull(stake.op)
        if existing is not None:
            skipped[stake.op] = f"open atrex pull request #{existing.number}"
            continue
        chosen.append(stake)
    return Choice(ranked, chosen, skipped, timed, schedule.max_prs)
