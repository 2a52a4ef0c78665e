"""`pull_request` opened / synchronize / reopened / ready_for_review: evaluate the head commit."""

from __future__ import annotations

import re

from ..newjobs import evaluate_job
from ..router import Intake, IntakeContext, Malformed, Router, WebhookEvent

ACTIONS = ("opened", "synchronize", "reopened", "ready_for_review")
_SHA = re.compile(r"^[0-9a-f]{40}$")


def register(router: Router) -> None:
    router.add("pull_request", ACTIONS, on_pull_request)


def on_pull_request(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    if event.get("pull_request", "draft", kind=bool, optional=True) and not ctx.config.run_drafts:
        return Intake(note="draft pull request skipped")
    head_sha = event.get("pull_request", "head", "sha", kind=str)
    if not _SHA.match(head_sha):
        raise Malformed("pull_request.head.sha is not a commit SHA")
    repo = event.get("repository", "full_name", kind=str)
    head_repo = event.get("pull_request", "head", "repo", "full_name", kind=str, optional=True)
    base_repo = event.get("pull_request", "base", "repo", "full_name", kind=str)
    job = evaluate_job(repo=repo, installation_id=event.get("installation", "id", kind=int),
                       pr=event.get("pull_request", "number", kind=int), head_sha=head_sha,
                       fork=head_repo != base_repo, reason=f"pull_request.{event.action}")
    return Intake(jobs=[job])
