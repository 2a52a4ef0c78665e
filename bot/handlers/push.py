"""`push` to a repository's default branch: evaluate every operator at the new tip, for the
history (docs/dashboard.md). Branch deletions, tags and other branches are ignored; so is every
push when ATREX_HISTORY_PUSH is off."""

from __future__ import annotations

from ..newjobs import branch_job
from ..router import Intake, IntakeContext, Malformed, Router, WebhookEvent

MAX_BRANCH = 255  # git allows longer names; the job's group key must stay within its column


def register(router: Router) -> None:
    router.add("push", None, on_push)


def on_push(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    if not ctx.config.history_push:
        return Intake(note="pushes are not evaluated (ATREX_HISTORY_PUSH=false)")
    default = event.get("repository", "default_branch", kind=str)
    if not 0 < len(default) <= MAX_BRANCH:
        raise Malformed(f"repository.default_branch is not 1 to {MAX_BRANCH} characters")
    if event.get("ref", kind=str) != f"refs/heads/{default}":
        return Intake(note="not a push to the default branch")
    if event.get("deleted", kind=bool, optional=True):
        return Intake(note="branch deleted")
    job = branch_job(repo=event.repo("repository", "full_name"),
                     installation_id=event.id("installation", "id"), branch=default,
                     sha=event.sha("after"), reason="push")
    return Intake(jobs=[job])
