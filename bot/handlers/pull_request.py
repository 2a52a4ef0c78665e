"""`pull_request` opened / synchronize / reopened / ready_for_review: evaluate the head commit."""

from __future__ import annotations

from ..newjobs import evaluate_job
from ..router import Intake, IntakeContext, Router, WebhookEvent

ACTIONS = ("opened", "synchronize", "reopened", "ready_for_review")


def register(router: Router) -> None:
    router.add("pull_request", ACTIONS, on_pull_request)


def on_pull_request(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    if event.get("pull_request", "draft", kind=bool, optional=True) and not ctx.config.run_drafts:
        return Intake(note="draft pull request skipped")
    head_sha = event.sha("pull_request", "head", "sha")
    repo = event.repo("repository", "full_name")
    head_repo = event.repo("pull_request", "head", "repo", "full_name", optional=True)
    base_repo = event.repo("pull_request", "base", "repo", "full_name")
    job = evaluate_job(repo=repo, installation_id=event.id("installation", "id"),
                       pr=event.id("pull_request", "number"), head_sha=head_sha,
                       fork=head_repo != base_repo, reason=f"pull_request.{event.action}")
    return Intake(jobs=[job])
