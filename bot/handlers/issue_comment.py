"""`issue_comment` created on a pull request: slash commands (never edits, never bots)."""

from __future__ import annotations

from ..commands import parse
from ..newjobs import command_job
from ..router import Intake, IntakeContext, Router, WebhookEvent


def register(router: Router) -> None:
    router.add("issue_comment", ("created",), on_comment_created)


def on_comment_created(event: WebhookEvent, ctx: IntakeContext) -> Intake:
    if event.get("issue", "pull_request", kind=dict, optional=True) is None:
        return Intake(note="comment on an issue, not a pull request")
    if event.get("comment", "user", "type", kind=str) == "Bot":
        return Intake(note="comment by a bot")
    app = event.get("comment", "performed_via_github_app", "id", kind=int, optional=True)
    if app is not None and app == ctx.config.app_id:
        return Intake(note="comment by this App")
    command = parse(event.get("comment", "body", kind=str))
    if command is None:
        return Intake(note="not a command")
    job = command_job(repo=event.get("repository", "full_name", kind=str),
                      installation_id=event.get("installation", "id", kind=int),
                      pr=event.get("issue", "number", kind=int),
                      comment_id=event.get("comment", "id", kind=int),
                      author=event.get("comment", "user", "login", kind=str),
                      name=command.name, args=command.args, error=command.error)
    return Intake(jobs=[job])
