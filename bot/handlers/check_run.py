"""`check_run` rerequested ("Re-run" in the Checks tab) on one of our check runs: evaluate again."""

from __future__ import annotations

from ..newjobs import EVALUATE, evaluate_job, job_id_from_external
from ..router import Intake, IntakeContext, Malformed, Router, WebhookEvent


def register(router: Router) -> None:
    router.add("check_run", ("rerequested",), on_rerequested)


def on_rerequested(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    external = event.get("check_run", "external_id", kind=str, optional=True) or ""
    app_id = event.id("check_run", "app", "id", optional=True)
    if ctx.config.app_id and app_id not in (None, ctx.config.app_id):
        return Intake(note="not an atrex check run")
    try:
        origin = job_id_from_external(external)
    except ValueError as exc:
        raise Malformed(f"check_run.{exc}") from None
    if origin is None:
        return Intake(note="not an atrex check run")
    repo, head_sha = event.repo("repository", "full_name"), event.sha("check_run", "head_sha")
    original = ctx.store.get(origin)
    prs = event.get("check_run", "pull_requests", kind=list, optional=True) or []
    if original is not None and original.kind == EVALUATE and original.payload["repo"] == repo:
        pr, fork = original.payload["pr"], original.payload.get("fork", True)
    elif prs:
        pr, fork = event.id("check_run", "pull_requests", 0, "number"), True
    else:
        return Intake(note="check run of an unknown pull request")
    job = evaluate_job(repo=repo, installation_id=event.id("installation", "id"), pr=pr,
                       head_sha=head_sha, fork=fork, reason="check_run.rerequested",
                       rerun=True)
    return Intake(jobs=[job])
