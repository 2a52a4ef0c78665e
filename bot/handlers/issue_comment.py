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
    app = event.id("comment", "performed_via_github_app", "id", optional=True)
    if app is not None and app == ctx.config.app_id:
        return Intake(note="comment by this App")
    command = parse(event.get("comment", "body", kind=str))
    if command is None:
        return Intake(note="not a command")
    job = command_job(repo=event.repo("repository", "full_name"),
                      installation_id=event.id("installation", "id"),
                      pr=event.id("issue", "number"), comment_id=event.id("comment", "id"),
                      author=event.login("comment", "user", "login"),
                      name=command.name, args=command.args, error=command.error)
    return Intake(jobs=[job])
