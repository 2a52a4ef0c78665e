"""Slash commands, run on the light queue: react, authorize, then do or refuse.

Reactions: 👀 on receipt; 👍 when the command was carried out at once (help, approve) or queued;
👎 when refused (permission, wrong SHA) and 😕 when malformed. Jobs a command starts (a rerun, an
optimization) react 🚀 on their own comment when they finish, 😕 if they fail.
"""

from __future__ import annotations

from .. import effects
from ..commands import HELP
from ..dashboard.access import AccessStore
from ..github import WRITE_PERMISSIONS, PullInfo
from ..jobs import JobContext, Outcome
from ..newjobs import GPU, LIGHT, evaluate_job, evaluate_key, optimize_job
from ..store import WAITING


def run(ctx: JobContext) -> Outcome:
    p = ctx.payload
    effects.react(ctx, "eyes")
    if p["error"]:
        return _refuse(ctx, "confused", f"`/atrex {p['command']}`: {p['error']}.\n\n{HELP}")
    if p["command"] == "help":
        effects.reply_once(ctx, "help", HELP)
        return _ok(ctx, "help")
    permission = ctx.api().permission(p["author"])
    if permission not in WRITE_PERMISSIONS:
        return _refuse(ctx, "-1", f"@{p['author']} `/atrex {p['command']}` needs write "
                       f"permission on this repository (yours: {permission}). Nothing was run.")
    pull = ctx.api().pull(p["pr"])
    return COMMANDS[p["command"]](ctx, pull)


def _ok(ctx: JobContext, what: str, **result) -> Outcome:
    effects.react(ctx, "+1")
    return Outcome.done(command=what, **result)


def _refuse(ctx: JobContext, reaction: str, message: str) -> Outcome:
    effects.reply_once(ctx, "refused", message)
    effects.react(ctx, reaction)
    return Outcome.done(refused=message)


def _spawn(ctx: JobContext, job) -> int:
    job_id, _ = ctx.store.enqueue(job, parent=(ctx.job.id, "spawned"))
    return job_id


def rerun(ctx: JobContext, pull: PullInfo) -> Outcome:
    p = ctx.payload
    job = evaluate_job(p["repo"], p["installation_id"], p["pr"], pull.head_sha, pull.fork,
                       reason="/atrex rerun", rerun=True, comment_id=p["comment_id"])
    return _ok(ctx, "rerun", job=_spawn(ctx, job))


def _held_for_judging(ctx: JobContext, sha: str) -> list:
    """Evaluations of this commit parked until its changes to what judges a kernel are
    approved (bot.tasks.evaluate, stage `publish`)."""
    p = ctx.payload
    jobs = [ctx.store.by_key(evaluate_key(p["repo"], p["pr"], sha, rerun))
            for rerun in (False, True)]
    return [j for j in jobs if j is not None and j.state == WAITING
            and j.payload.get("stage") == "publish"]


def approve(ctx: JobContext, pull: PullInfo) -> Outcome:
    p = ctx.payload
    sha = p["args"][0].lower()
    if not pull.head_sha.startswith(sha):
        return _refuse(ctx, "-1", f"`{sha}` is not the head commit of this pull request "
                       f"(`{pull.head_sha}`); approve exactly the commit to run.")
    held = _held_for_judging(ctx, pull.head_sha)
    if held or not pull.fork:
        # the approval is recorded before the parked jobs are looked at again: one that parks
        # meanwhile sees it and releases itself
        ctx.store.approve_judging(p["repo"], p["pr"], pull.head_sha, p["author"])
        for job in _held_for_judging(ctx, pull.head_sha):
            ctx.store.release(job.id, LIGHT)
    if held:
        effects.reply_once(ctx, "approved", f"Approved the changes to what judges the kernels "
                           f"in `{pull.head_sha[:12]}` (by @{p['author']}): atrex publishes its "
                           "verdict for this commit now. A new push needs a new approval.")
        return _ok(ctx, "approve", judging=True, jobs=[j.id for j in held])
    if not pull.fork:
        effects.reply_once(ctx, "approved", "This pull request is not from a fork: its commits "
                           "are evaluated without approval. The approval is recorded for changes "
                           f"this commit (`{pull.head_sha[:12]}`) makes to what judges its "
                           "kernels, if it makes any.")
        return _ok(ctx, "approve", needed=False)
    ctx.store.approve(p["repo"], p["pr"], pull.head_sha, p["author"])
    parked = ctx.store.by_key(evaluate_key(p["repo"], p["pr"], pull.head_sha))
    if parked is not None and parked.state == WAITING:
        ctx.store.release(parked.id, GPU)
        job_id = parked.id
    elif parked is None:
        job_id = _spawn(ctx, evaluate_job(p["repo"], p["installation_id"], p["pr"],
                                          pull.head_sha, True, reason="/atrex approve"))
    else:
        job_id = parked.id
    effects.reply_once(ctx, "approved", f"Approved `{pull.head_sha[:12]}` (by @{p['author']}): "
                       "atrex evaluates this commit now. A new push needs a new approval.")
    return _ok(ctx, "approve", job=job_id)


def optimize(ctx: JobContext, pull: PullInfo) -> Outcome:
    p = ctx.payload
    if pull.fork and not ctx.store.is_approved(p["repo"], p["pr"], pull.head_sha):
        return _refuse(ctx, "-1", "This pull request comes from a fork: approve its head commit "
                       f"first (`/atrex approve {pull.head_sha}`).")
    job = optimize_job(p["repo"], p["installation_id"], p["pr"], pull.head_sha, p["args"],
                       p["comment_id"], p["author"])
    return _ok(ctx, "optimize", job=_spawn(ctx, job))


def dashboard(ctx: JobContext, pull: PullInfo) -> Outcome:
    """Post the dashboard's links: everyone reading this thread can read the repository, so the
    secret link goes no further than the dashboard would (docs/dashboard.md)."""
    p = ctx.payload
    url = ctx.config.dashboard_url(p["repo"])
    if url is None:
        return _refuse(ctx, "confused", "This atrex installation has no public URL "
                       "(`ATREX_PUBLIC_URL`), so its dashboards cannot be reached.")
    secret = ctx.store.effect(ctx.job.id, "dashboard_link")  # one rotation per command
    if secret is None:
        secret = AccessStore(ctx.store).link_secret(p["repo"], rotate=p["args"] == ["rotate"],
                                                    by=p["author"])
        ctx.store.set_effect(ctx.job.id, "dashboard_link", secret)
    rotated = " (new: every earlier secret link stopped working)" if p["args"] else ""
    effects.reply_once(ctx, "dashboard", (
        f"📈 **Dashboard of `{p['repo']}`**: {url}\n\n"
        "- Sign in with GitHub: shown to users who can read this repository.\n"
        f"- Secret link{rotated}: {url}?key={secret}\n  It opens without signing in, for "
        "anyone who has it; `/atrex dashboard rotate` replaces it."))
    return _ok(ctx, "dashboard")


COMMANDS = {"rerun": rerun, "approve": approve, "optimize": optimize, "dashboard": dashboard}


def give_up(ctx: JobContext, error: str) -> None:
    effects.reply_once(ctx, "error", f"atrex could not process `/atrex {ctx.payload['command']}`"
                       f": {error.splitlines()[-1][:300] if error else 'unknown error'}")
    effects.react(ctx, "confused")
