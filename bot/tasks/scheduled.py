"""A scheduled optimization run on one repository (gpu queue).

Clone the default branch at its current tip, hand it to `Runtime.scheduled_runner` (the agent
bridge: evaluate, rank by GPU-hours at stake, run the agent on the top operators, open or update
their PRs against the default branch) and record the outcome as the job's result. The operators
chosen are stored as the job's `choice` effect before the agent runs: an attempt after a crash
runs the same ones (updating a PR the crashed attempt opened) instead of ranking again, which
would pass over that operator, now with an open PR, and open more than `max_prs` PRs. There is no PR
thread to answer in: what was ranked, chosen, skipped and opened goes to the job's result and the
worker's log.
"""

from __future__ import annotations

import json
import logging
import shutil

from ..gitwork import clone_branch
from ..history import BRANCH
from ..jobs import JobContext, Outcome, ScheduledRequest, check_lease
from ..prhistory import history_for

log = logging.getLogger(__name__)


def run(ctx: JobContext) -> Outcome:
    runner = ctx.runtime.scheduled_runner
    if runner is None:
        return Outcome.failed("the optimization agent is not installed on this worker")
    p = ctx.payload
    installation = p["installation_id"]
    api = ctx.api()
    branch, clone_url = api.default_branch(), api.clone_url()
    work = ctx.work_dir()
    try:
        workdir, sha = clone_branch(ctx.config.data_dir.resolve(), work, p["repo"], clone_url,
                                    branch, ctx.runtime.token(installation))
        log.info("job %s: scheduled run on %s@%s (%s)", ctx.job.id, p["repo"], branch, sha[:12])
        chosen = ctx.store.effect(ctx.job.id, "choice")
        result = runner(ScheduledRequest(
            repo=p["repo"], default_branch=branch, head_sha=sha, workdir=workdir,
            out_dir=work / "agent", device=ctx.config.device, device_index=ctx.gpu_index,
            github=ctx.runtime.github_client(installation),
            token=lambda: ctx.runtime.token(installation) or "",
            progress=lambda line: log.info("job %s: %s", ctx.job.id, line),
            choice=json.loads(chosen) if chosen else None,
            record_choice=lambda choice: ctx.store.set_effect(ctx.job.id, "choice",
                                                              json.dumps(choice)),
            record_report=lambda report, threshold: history_for(ctx.config, ctx.store).record(
                f"job:{ctx.job.id}:schedule", p["repo"], sha, BRANCH, report, ref=branch,
                job_id=ctx.job.id, threshold=threshold)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    check_lease(ctx)
    result = {**result, "branch": branch, "sha": sha}
    if result.get("error"):
        log.warning("job %s: scheduled run on %s: %s", ctx.job.id, p["repo"], result["error"])
        return Outcome.failed(result["error"])
    log.info("job %s: scheduled run on %s done: %s", ctx.job.id, p["repo"],
             ", ".join(f"{pr['action']} #{pr['number']} ({pr['op']})" for pr in result["prs"])
             or "no pull request")
    return Outcome.done(**result)


def give_up(ctx: JobContext, error: str) -> None:
    last = error.strip().splitlines()[-1][:300] if error.strip() else "unknown error"
    log.error("job %s: scheduled run on %s failed: %s", ctx.job.id, ctx.payload["repo"], last)
