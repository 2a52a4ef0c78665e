"""`/atrex optimize`: hand the PR to the agent (injected as `Runtime.optimize_runner`)."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping

from .. import effects
from ..gitwork import CommitGone, clone_for_agent
from ..jobs import JobContext, OptimizeRequest, Outcome

log = logging.getLogger(__name__)

NOT_CONFIGURED = ("The optimization agent is not configured on this atrex installation "
                  "(`ATREX_OPTIMIZE_RUNNER` is unset), so `/atrex optimize` cannot run. "
                  "Nothing was changed.")


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
        workdir = clone_for_agent(ctx.config.data_dir.resolve(), work, p["repo"], p["pr"],
                                  p["head_sha"], pull.head_clone_url, pull.head_ref,
                                  pull.base_clone_url, pull.base_ref,
                                  ctx.runtime.token(p["installation_id"]))
    except CommitGone as exc:
        effects.reply_once(ctx, "result", f"`/atrex optimize` could not fetch the commit: {exc}")
        return Outcome.failed(str(exc))
    try:
        result = runner(_request(ctx, pull, workdir))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    effects.reply_once(ctx, "result", _summary(result))
    effects.react(ctx, "rocket")
    return Outcome.done(pr_url=_field(result, "pr_url"))


def _request(ctx: JobContext, pull, workdir) -> OptimizeRequest:
    p = ctx.payload
    installation = p["installation_id"]
    return OptimizeRequest(
        repo=p["repo"], pr=p["pr"], head_sha=p["head_sha"], head_ref=pull.head_ref,
        head_repo=pull.head_repo, base_ref=pull.base_ref, ops=list(p["ops"]), workdir=workdir,
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
