"""`/atrex optimize`: hand the PR to the agent (injected as `Runtime.optimize_runner`).

Clone the PR's head, pick the operators (those named in the command, else the ones the PR changes),
call the runner (by default `atrex.bot.agent_bridge.AgentBridge.optimize`), then post its reply
once and react with its outcome (🚀 finished, 😕 failed).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path

from atrex.runner.errors import FormatError
from atrex.runner.repo import load_repo

from .. import effects
from ..changes import affected_ops
from ..gitwork import CommitGone, clone_for_agent, pr_changes
from ..jobs import JobContext, OptimizeRequest, Outcome, check_lease

log = logging.getLogger(__name__)

NOT_CONFIGURED = ("The optimization agent is not configured on this atrex installation "
                  "(the agent is not installed, or `ATREX_OPTIMIZE_RUNNER=none`), so "
                  "`/atrex optimize` cannot run. Nothing was changed.")
NO_CHANGED_OPS = ("`/atrex optimize`: this pull request changes no operator, so there is "
                  "nothing to optimize by default. Name the operators: `/atrex optimize <op> ...`.")


def run(ctx: JobContext) -> Outcome:
    runner = ctx.runtime.optimize_runner
    if runner is None:
        effects.reply_once(ctx, "result", NOT_CONFIGURED)
        effects.react(ctx, "confused")
        return Outcome.failed("the optimization agent is not configured")
    p = ctx.payload
    pull = ctx.api().pull(p["pr"])
    if pull.fork and not ctx.store.is_approved(p["repo"], p["pr"], p["head_sha"]):
        effects.reply_once(ctx, "result", "Not run: this fork's commit is not approved.")
        return Outcome.failed("fork commit not approved")
    work = ctx.work_dir()
    try:
        try:
            workdir = clone_for_agent(ctx.config.data_dir.resolve(), work, p["repo"], p["pr"],
                                      p["head_sha"], pull.head_clone_url, pull.head_ref,
                                      pull.base_clone_url, pull.base_ref,
                                      ctx.runtime.token(p["installation_id"]))
            ops = list(p["ops"]) or _changed_ops(ctx, workdir, work / "merge-base")
        except CommitGone as exc:
            return _stop(ctx, f"`/atrex optimize` could not fetch the commit: {exc}", str(exc))
        except FormatError as exc:
            where = str(exc).replace(f"{work.resolve() / 'repo'}/", "")  # no server paths
            return _stop(ctx, f"`/atrex optimize`: the repository cannot be loaded: {where}",
                         where)
        if not ops:
            return _stop(ctx, NO_CHANGED_OPS, "no operator changed")
        result = runner(_request(ctx, pull, workdir, ops))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    check_lease(ctx)
    effects.reply_once(ctx, "result", _summary(result),
                       rest="the diffs of the follow-up pull requests linked above")
    effects.react(ctx, _field(result, "reaction") or "rocket")
    done = {"pr_url": _field(result, "pr_url")}
    if _field(result, "prs"):
        done["prs"] = _field(result, "prs")
    return Outcome.done(**done)


def _stop(ctx: JobContext, message: str, error: str) -> Outcome:
    effects.reply_once(ctx, "result", message)
    effects.react(ctx, "confused")
    return Outcome.failed(error)


def _changed_ops(ctx: JobContext, workdir: Path, base_dir: Path) -> list[str]:
    """The operators the PR changes (as the evaluation finds them)."""
    p = ctx.payload
    changed = pr_changes(ctx.config.data_dir.resolve(), p["repo"], p["pr"], p["head_sha"],
                         base_dir)
    return affected_ops(load_repo(workdir), base_dir, changed).ops


def _request(ctx: JobContext, pull, workdir: Path, ops: list[str]) -> OptimizeRequest:
    p = ctx.payload
    installation = p["installation_id"]
    return OptimizeRequest(
        repo=p["repo"], pr=p["pr"], head_sha=p["head_sha"], head_ref=pull.head_ref,
        head_repo=pull.head_repo, base_ref=pull.base_ref, ops=ops, workdir=workdir,
        requested_by=p["author"], device=ctx.config.device, device_index=ctx.gpu_index,
        github=ctx.runtime.github_client(installation),
        token=lambda: ctx.runtime.token(installation) or "",
        progress=lambda line: log.info("job %s: %s", ctx.job.id, line))


def _field(result, name: str):
    if isinstance(result, Mapping):
        return result.get(name)
    return getattr(result, name, None)


def _summary(result) -> str:
    if isinstance(result, str):
        return result
    summary, url = _field(result, "summary"), _field(result, "pr_url")
    if summary:
        return summary
    return f"Optimization finished: {url}" if url else "Optimization finished without a change."


def give_up(ctx: JobContext, error: str) -> None:
    effects.reply_once(ctx, "result", "`/atrex optimize` failed: "
                       f"{error.splitlines()[-1][:300] if error else 'unknown error'}")
    effects.react(ctx, "confused")
