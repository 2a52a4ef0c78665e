"""The jobs the bot records, built in one place so handlers and tasks agree on keys and payloads.

Queues: `light` jobs only talk to GitHub (create a queued check run, answer a command) and never
run candidate code; `gpu` jobs evaluate or optimize, one per GPU at a time. A PR evaluation starts
on `light` (its check run appears as queued at once) and moves to `gpu`. Jobs of one pull request
share a group, so two GPUs never work on the same PR at the same time.

Dedupe keys are (repository, PR, head SHA, command): a PR event for a commit already recorded is a
duplicate forever; a rerun is a duplicate only while an identical one is still pending.
"""

from __future__ import annotations

import re

from .store import NewJob

LIGHT, GPU = "light", "gpu"
EVALUATE, COMMAND, OPTIMIZE = "evaluate", "command", "optimize"
SCHEDULED = "scheduled_optimize"
EVALUATE_BRANCH = "evaluate_branch"


def group_key(repo: str, pr: int) -> str:
    return f"{repo}#{pr}"


def evaluate_key(repo: str, pr: int, sha: str, rerun: bool = False) -> str:
    return f"{repo}#{pr}@{sha}:{'rerun' if rerun else 'evaluate'}"


def evaluate_job(repo: str, installation_id: int, pr: int, head_sha: str, fork: bool,
                 reason: str, rerun: bool = False, comment_id: int | None = None) -> NewJob:
    payload = {"stage": "announce", "repo": repo, "installation_id": installation_id, "pr": pr,
               "head_sha": head_sha, "fork": fork, "reason": reason, "comment_id": comment_id}
    return NewJob(kind=EVALUATE, queue=LIGHT, payload=payload,
                  dedupe_key=evaluate_key(repo, pr, head_sha, rerun),
                  dedupe="active" if rerun else "always", group_key=group_key(repo, pr))


def command_job(repo: str, installation_id: int, pr: int, comment_id: int, author: str,
                name: str, args: list[str], error: str | None) -> NewJob:
    payload = {"repo": repo, "installation_id": installation_id, "pr": pr,
               "comment_id": comment_id, "author": author, "command": name, "args": args,
               "error": error}
    return NewJob(kind=COMMAND, queue=LIGHT, payload=payload,
                  dedupe_key=f"{repo}#{pr}:comment:{comment_id}")


def optimize_job(repo: str, installation_id: int, pr: int, head_sha: str, ops: list[str],
                 comment_id: int, author: str) -> NewJob:
    payload = {"repo": repo, "installation_id": installation_id, "pr": pr,
               "head_sha": head_sha, "ops": ops, "comment_id": comment_id, "author": author}
    key = f"{repo}#{pr}@{head_sha}:optimize:{','.join(sorted(ops)) or '*'}"
    return NewJob(kind=OPTIMIZE, queue=GPU, payload=payload, dedupe_key=key, dedupe="active",
                  group_key=group_key(repo, pr))


def scheduled_group(repo: str) -> str:
    return f"{repo}#schedule"


def scheduled_job(repo: str, installation_id: int, every_hours: float, period: int) -> NewJob:
    """One scheduled optimization run of a repository for one period (never recorded twice)."""
    payload = {"repo": repo, "installation_id": installation_id, "every_hours": every_hours,
               "period": period}
    return NewJob(kind=SCHEDULED, queue=GPU, payload=payload,
                  dedupe_key=f"{repo}:schedule:{every_hours:g}h:{period}", dedupe="always",
                  group_key=scheduled_group(repo))


def branch_job(repo: str, installation_id: int, branch: str, sha: str, reason: str) -> NewJob:
    """Evaluate every operator of the default branch at `sha` for the history (once per commit;
    a newer push to the branch supersedes a queued one)."""
    payload = {"repo": repo, "installation_id": installation_id, "branch": branch, "sha": sha,
               "reason": reason}
    return NewJob(kind=EVALUATE_BRANCH, queue=GPU, payload=payload,
                  dedupe_key=f"{repo}@{sha}:branch", dedupe="always",
                  group_key=f"{repo}#branch:{branch}")


_EXTERNAL = re.compile(r"atrex-job-([0-9]+)")
MAX_JOB_ID = 2**63 - 1  # the jobs table's integer id


def external_id(job_id: int) -> str:
    """The check run's external_id: finds it again after a crash, and maps a re-run to its job."""
    return f"atrex-job-{job_id}"


def job_id_from_external(external: str) -> int | None:
    """The job id of one of our check runs; None for someone else's. Raises ValueError for our
    prefix with a number no job can have (it would overflow the id column)."""
    match = _EXTERNAL.fullmatch(external or "")
    if match is None:
        return None
    digits = match.group(1)
    if len(digits) > 19 or not 1 <= int(digits) <= MAX_JOB_ID:
        raise ValueError(f"external_id {external[:40]!r} names no possible job (1 to "
                         f"{MAX_JOB_ID})")
    return int(digits)
