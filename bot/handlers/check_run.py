"""`check_run` rerequested ("Re-run" in the Checks tab) on one of our check runs: evaluate again."""

from __future__ import annotations

from ..newjobs import evaluate_job, job_id_from_external
from ..router import Intake, IntakeContext, Router, WebhookEvent


def register(router: Router) -> None:
    router.add("check_run", ("rerequested",), on_rerequested)


def on_rerequested(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    external = event.get("check_run", "external_id", kind=str, optional=True) or ""
    app_id = event.get("check_run", "app", "id", kind=int, optional=True)
    origin = job_id_from_external(external)
    if origin is None or (ctx.config.app_id and app_id not in (None, ctx.config.app_id)):
        return Intake(note="not an atrex check run")
    original = ctx.store.get(origin)
    prs = event.get("check_run", "pull_requests", kind=list, optional=True) or []
    if original is not None:
        pr, fork = original.payload["pr"], original.payload.get("fork", True)
    elif prs:
        pr, fork = event.get("check_run", "pull_requests", 0, "number", kind=int), True
    else:
        return Intake(note="check run of an unknown pull request")
    job = evaluate_job(repo=event.get("repository", "full_name", kind=str),
                       installation_id=event.get("installation", "id", kind=int), pr=pr,
                       head_sha=event.get("check_run", "head_sha", kind=str), fork=fork,
                       reason="check_run.rerequested", rerun=True)
    return Intake(jobs=[job])
