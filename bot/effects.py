"""GitHub effects that happen once, however often a job is re-run after a crash.

- check run: created with `external_id = atrex-job-<id>`; its id is stored; a re-run that finds no
  stored id looks the run up by external id before creating one; completing it is skipped when it is
  already completed with the same conclusion.
- sticky comment: one per PR, found by its hidden marker (and the bot's login) and edited in place.
- replies: a hidden per-job marker; stored once posted, looked up on a re-run before posting.
- reactions: GitHub answers a repeated identical reaction with the existing one.
"""

from __future__ import annotations

import datetime as dt
import logging

from .jobs import JobContext
from .newjobs import external_id
from .render import COMMENT_LIMIT, STICKY_MARKER, fit_text

log = logging.getLogger(__name__)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def ensure_check_run(ctx: JobContext, output: dict[str, str]) -> int:
    stored = ctx.store.effect(ctx.job.id, "check_run")
    if stored is not None:
        return int(stored)
    api, sha = ctx.api(), ctx.payload["head_sha"]
    name, ext = ctx.config.check_name, external_id(ctx.job.id)
    found = api.find_check_run(sha, name, ext) if ctx.job.attempts > 1 else None
    check_id = found if found is not None else api.create_check_run(sha, name, ext, output)
    ctx.store.set_effect(ctx.job.id, "check_run", str(check_id))
    return check_id


def start_check_run(ctx: JobContext, check_id: int, output: dict[str, str]) -> None:
    ctx.api().update_check_run(check_id, status="in_progress", started_at=now(), output=output)


def complete_check_run(ctx: JobContext, check_id: int, conclusion: str,
                       output: dict[str, str]) -> None:
    api = ctx.api()
    if ctx.job.attempts > 1:
        found = api.check_run(check_id)
        # the same conclusion: this job completed it before a crash. Another one (an
        # `action_required` a maintainer's approval now lifts) is updated.
        if found["status"] == "completed" and found["conclusion"] == conclusion:
            log.info("job %s: check run %s already completed", ctx.job.id, check_id)
            return
    api.update_check_run(check_id, status="completed", conclusion=conclusion,
                         completed_at=now(), output=output)


def upsert_sticky(ctx: JobContext, body: str) -> int:
    """Edit the PR's sticky comment in place, or create it; returns its id."""
    api, repo, pr = ctx.api(), ctx.payload["repo"], ctx.payload["pr"]
    stored = ctx.store.sticky(repo, pr)
    if stored is not None and api.edit_comment(pr, stored, body):
        return stored
    found = api.find_comment(pr, STICKY_MARKER)
    if found is not None and api.edit_comment(pr, found, body):
        comment_id = found
    else:
        comment_id = api.create_comment(pr, body, STICKY_MARKER)
    ctx.store.set_sticky(repo, pr, comment_id)
    return comment_id


def has_sticky(ctx: JobContext) -> bool:
    repo, pr = ctx.payload["repo"], ctx.payload["pr"]
    if ctx.store.sticky(repo, pr) is not None:
        return True
    return ctx.api().find_comment(pr, STICKY_MARKER) is not None


def reply_once(ctx: JobContext, key: str, body: str,
               rest: str = "not kept elsewhere (re-run for fewer operators)") -> int:
    """Post a reply on the PR once per (job, key), fitted to GitHub's comment limit in bytes
    (an agent's reply carries diffs); `rest` says where what was left out can be read."""
    name = f"reply:{key}"
    stored = ctx.store.effect(ctx.job.id, name)
    if stored is not None:
        return int(stored)
    marker = f"<!-- atrex:reply job={ctx.job.id} key={key} -->"
    body = fit_text(f"{marker}\n{body}", COMMENT_LIMIT, rest)
    api, pr = ctx.api(), ctx.payload["pr"]
    found = api.find_comment(pr, marker) if ctx.job.attempts > 1 else None
    comment_id = found if found is not None else api.create_comment(pr, body, marker)
    ctx.store.set_effect(ctx.job.id, name, str(comment_id))
    return comment_id


def react(ctx: JobContext, content: str) -> None:
    """React to the comment that asked for this job, if one did."""
    comment_id = ctx.payload.get("comment_id")
    if comment_id is not None:
        ctx.api().react(ctx.payload["pr"], comment_id, content)
