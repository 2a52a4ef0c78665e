"""Evaluating a pull request commit: check run queued -> in_progress -> completed, sticky comment.

Stage `announce` (light queue): create the queued check run; park the job when it is a fork PR
whose head commit no maintainer approved, else hand it to the GPU queue. Stage `run` (gpu queue):
fetch head and merge base, find the changed operators, evaluate head and base interleaved in one
runner call, store the reports (a checkpoint: a re-run after a crash does not evaluate again), then
update the sticky comment and complete the check run. When the commit changes what judges its
kernels in a way that needs approval (bot.judging) and no maintainer approved it, the check run
completes as `action_required` and the job parks (stage `publish`, light queue) until
`/atrex approve <sha>` releases it; it then publishes the stored verdict again, without
evaluating.
"""

from __future__ import annotations

import json
import logging
import shutil
import time

from atrex.runner.errors import FormatError
from atrex.runner.evaluate import EvalOptions

from .. import effects
from ..gitwork import Checkout, CommitGone, checkout_pr
from ..jobs import JobContext, Outcome, check_lease
from ..judging import ACTION_REQUIRED
from ..newjobs import GPU, LIGHT
from ..prcheck import (
    evaluate_checkout,
    gated,
    result_from_dict,
    result_to_dict,
    sandbox_launcher,
)
from ..prhistory import history_for, record_pr, with_trend
from ..render import PrResult, check_output, comment_body, default_full_report
from ..store import WAITING
from ..verdict import FAILURE, Judgement

log = logging.getLogger(__name__)


def _output(title: str, summary: str) -> dict[str, str]:
    return {"title": title, "summary": summary}


def _approval_text(sha: str) -> dict[str, str]:
    return _output("Waiting for a maintainer's approval",
                   "This pull request comes from a fork. atrex runs its code only after a "
                   "maintainer approves this exact commit by commenting\n\n"
                   f"    /atrex approve {sha}\n\nA new push needs a new approval.")


def run(ctx: JobContext) -> Outcome:
    if ctx.payload.get("stage", "announce") == "announce":
        return announce(ctx)
    return evaluate_commit(ctx)


def _needs_approval(ctx: JobContext, fork: bool) -> bool:
    p = ctx.payload
    return fork and not ctx.store.is_approved(p["repo"], p["pr"], p["head_sha"])


def announce(ctx: JobContext) -> Outcome:
    p = ctx.payload
    queued = _output("Queued", f"Waiting for a GPU to evaluate `{p['head_sha'][:12]}`.")
    check_id = effects.ensure_check_run(ctx, queued)
    payload = {**p, "stage": "run"}
    if _needs_approval(ctx, p["fork"]):
        ctx.api().update_check_run(check_id, output=_approval_text(p["head_sha"]))
        ctx.store.move(ctx.job.id, ctx.owner, GPU, state=WAITING, payload=payload)
    else:
        ctx.store.move(ctx.job.id, ctx.owner, GPU, payload=payload)
    return Outcome.moved()


def _skip(ctx: JobContext, check_id: int, title: str, summary: str) -> Outcome:
    ctx.api().update_check_run(check_id, status="completed", conclusion="skipped",
                               output=_output(title, summary))
    return Outcome.done(skipped=title)


def evaluate_commit(ctx: JobContext) -> Outcome:
    p = ctx.payload
    check_id = effects.ensure_check_run(ctx, _output("Queued", "Waiting for a GPU."))
    newer = ctx.store.newer_in_group(ctx.job, ctx.job.kind)
    if newer is not None and newer.payload["head_sha"] != p["head_sha"]:
        return _skip(ctx, check_id, "Superseded",
                     f"A newer commit (`{newer.payload['head_sha'][:12]}`) is evaluated instead.")
    pull = ctx.api().pull(p["pr"])
    if _needs_approval(ctx, p["fork"] or pull.fork):
        ctx.api().update_check_run(check_id, output=_approval_text(p["head_sha"]))
        ctx.store.move(ctx.job.id, ctx.owner, GPU, state=WAITING)
        return Outcome.moved()
    result = _load_checkpoint(ctx)
    if result is None and ctx.job.queue != GPU:  # a released `publish` stage lost its reports
        ctx.store.move(ctx.job.id, ctx.owner, GPU, payload={**p, "stage": "run"})
        return Outcome.moved()
    if result is None:
        if pull.state != "open":
            return _skip(ctx, check_id, "Pull request closed", "Nothing was evaluated.")
        effects.start_check_run(ctx, check_id, _output("Evaluating", "Fetching the commit."))
        try:
            result = _evaluate(ctx, pull, check_id)
        except CommitGone as exc:
            return _skip(ctx, check_id, "Commit no longer on the branch", str(exc))
        _save_checkpoint(ctx, result)
    return _publish(ctx, check_id, result)


def _evaluate(ctx: JobContext, pull, check_id: int) -> PrResult:
    """Check out and evaluate. A failed fetch raises (the job is tried again later)."""
    p = ctx.payload
    work = ctx.work_dir()
    try:
        checkout = checkout_pr(
            ctx.config.data_dir.resolve(), work, p["repo"], p["pr"], p["head_sha"],
            pull.head_clone_url, pull.head_ref, pull.base_clone_url, pull.base_ref,
            ctx.runtime.token(p["installation_id"]))
        try:
            return _evaluate_checkout(ctx, checkout, check_id)
        except FormatError as exc:
            return _error_result(ctx, checkout.base_sha, str(exc))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _error_result(ctx: JobContext, base_sha: str | None, error: str) -> PrResult:
    judgement = Judgement(FAILURE, "The repository could not be evaluated")
    return PrResult(ctx.payload["head_sha"], base_sha, judgement, error=error, job_id=ctx.job.id)


def _evaluate_checkout(ctx: JobContext, checkout: Checkout, check_id: int) -> PrResult:
    c = ctx.config
    options = EvalOptions(device=c.device, device_index=ctx.gpu_index, launcher=sandbox_launcher(
        c.sandbox, c.runner_image, c.sandbox_memory, c.sandbox_cpus, c.sandbox_pids))
    evaluate = ctx.runtime.evaluate or _runner_evaluate()
    return evaluate_checkout(checkout, options, evaluate, _progress(ctx, check_id),
                             job_id=ctx.job.id)


def _runner_evaluate():
    from atrex.runner.evaluate import evaluate

    return evaluate


def _progress(ctx: JobContext, check_id: int):
    """Show the shape being evaluated on the check run, at most every progress_interval_s."""
    last = [0.0]

    def report(op: str, shape: str, label: str | None) -> None:
        now = time.monotonic()
        if now - last[0] < ctx.config.progress_interval_s:
            return
        last[0] = now
        try:
            ctx.api().update_check_run(check_id, output=_output(
                "Evaluating", f"Operator `{op}`, shape `{shape}`, candidate {label or '-'}."))
        except Exception as exc:  # progress is cosmetic: never fail the evaluation for it
            log.warning("job %s: progress update failed: %s", ctx.job.id, exc)

    return report


def _save_checkpoint(ctx: JobContext, result: PrResult) -> None:
    ctx.store.set_effect(ctx.job.id, "reports", json.dumps(result_to_dict(result)))


def _load_checkpoint(ctx: JobContext) -> PrResult | None:
    raw = ctx.store.effect(ctx.job.id, "reports")
    return None if raw is None else result_from_dict(json.loads(raw), job_id=ctx.job.id)


def _approver(ctx: JobContext) -> str | None:
    p = ctx.payload
    return ctx.store.judging_approver(p["repo"], p["pr"], p["head_sha"])


def _publish(ctx: JobContext, check_id: int, result: PrResult) -> Outcome:
    check_lease(ctx)
    p = ctx.payload
    history = history_for(ctx.config, ctx.store)
    record_pr(history, p["repo"], p["pr"], ctx.job.id, result)
    result = with_trend(history, ctx.config, p["repo"], result)
    result = gated(result, _approver(ctx))
    conclusion = result.judgement.conclusion
    if result.worth_a_comment or effects.has_sticky(ctx):
        def where() -> str:  # asked only when the comment is too long for GitHub
            url = ctx.api().check_run(check_id)["html_url"]
            return f"[the check run]({url}) (its details); {default_full_report(result)}"

        effects.upsert_sticky(ctx, comment_body(result, full_report=where))
    effects.complete_check_run(ctx, check_id, conclusion, check_output(result))
    if conclusion == ACTION_REQUIRED:
        return _await_judging_approval(ctx)
    effects.react(ctx, "rocket")
    return Outcome.done(conclusion=conclusion, title=result.judgement.title,
                        ops=[c.name for c in result.judgement.ops])


def _await_judging_approval(ctx: JobContext) -> Outcome:
    """Park until `/atrex approve <sha>`; the approval may have landed while this published."""
    ctx.store.move(ctx.job.id, ctx.owner, LIGHT, state=WAITING,
                   payload={**ctx.payload, "stage": "publish"})
    if _approver(ctx) is not None:
        ctx.store.release(ctx.job.id, LIGHT)
    return Outcome.moved()


def give_up(ctx: JobContext, error: str) -> None:
    check = ctx.store.effect(ctx.job.id, "check_run")
    if check is not None:
        ctx.api().update_check_run(int(check), status="completed", conclusion=FAILURE,
                                   completed_at=effects.now(), output=_output(
                                       "atrex could not evaluate this commit",
                                       f"```\n{error[-3000:]}\n```\n\nComment `/atrex rerun` "
                                       "to try again."))
    effects.react(ctx, "confused")
