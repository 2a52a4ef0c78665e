"""`push` to a repository's default branch: evaluate every operator at the new tip, for the
history (docs/dashboard.md). Branch deletions, tags and other branches are ignored; so is every
push when ATREX_HISTORY_PUSH is off."""

from __future__ import annotations

import re

from ..newjobs import branch_job
from ..router import Intake, IntakeContext, Malformed, Router, WebhookEvent

_SHA = re.compile(r"^[0-9a-f]{40}$")


def register(router: Router) -> None:
    router.add("push", None, on_push)


def on_push(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    if not ctx.config.history_push:
        return Intake(note="pushes are not evaluated (ATREX_HISTORY_PUSH=false)")
    default = event.get("repository", "default_branch", kind=str)
    if event.get("ref", kind=str) != f"refs/heads/{default}":
        return Intake(note="not a push to the default branch")
    if event.get("deleted", kind=bool, optional=True):
        return Intake(note="branch deleted")
    sha = event.get("after", kind=str)
    if not _SHA.match(sha):
        raise Malformed("after is not a commit SHA")
    job = branch_job(repo=event.get("repository", "full_name", kind=str),
                     installation_id=event.get("installation", "id", kind=int), branch=default,
                     sha=sha, reason="push")
    return Intake(jobs=[job])
