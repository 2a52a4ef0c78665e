"""Evaluating the default branch at a pushed commit, for the history (gpu queue).

Every operator is evaluated (not only changed ones): the dashboard's repository score and
GPU-hours at stake are over the whole repository. The job exports the commit (no `.git`), runs
the runner like a PR evaluation's head (the same sandbox settings), asks GitHub which merged pull
request brought the commit (the dashboard's "moved by" links) and records the report in the
history; that record is the job's checkpoint: an attempt after a crash that finds it records
nothing again. A newer push to the branch supersedes a queued older one, and a commit
force-pushed away is skipped. There is no check run or comment: the numbers go to the history.
"""

from __future__ import annotations

import logging
import shutil

from atrex.runner.errors import FormatError
from atrex.runner.evaluate import EvalOptions
from atrex.runner.repo import load_repo
from atrex.runner.sandbox import CandidateRef

from ..gitwork import CommitGone, export_branch_commit
from ..history import BRANCH
from ..jobs import JobContext, Outcome, check_lease
from ..prcheck import sandbox_launcher
from ..prhistory import history_for

log = logging.getLogger(__name__)


def run(ctx: JobContext) -> Outcome:
    p = ctx.payload
    history = history_for(ctx.config, ctx.store)
    source = f"job:{ctx.job.id}:branch"
    known = history.recorded(source)
    if known is not None:
        return Outcome.done(evaluation=known, sha=p["sha"])
    newer = ctx.store.newer_in_group(ctx.job, ctx.job.kind)
    if newer is not None and newer.payload["sha"] != p["sha"]:
        return Outcome.done(skipped=f"superseded by {newer.payload['sha'][:12]}")
    api = ctx.api()
    pulls = api.commit_pulls(p["sha"])
    work = ctx.work_dir()
    try:
        tree = export_branch_commit(ctx.config.data_dir.resolve(), work, p["repo"],
                                    api.clone_url(), p["branch"], p["sha"],
                                    ctx.runtime.token(p["installation_id"]))
        repo = load_repo(tree)
        report = _evaluate(ctx, repo)
    except CommitGone as exc:
        return Outcome.done(skipped=str(exc))
    except FormatError as exc:
        return Outcome.failed(f"the repository could not be evaluated at {p['sha'][:12]}: {exc}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    check_lease(ctx)
    evaluation = history.record(source, p["repo"], p["sha"], BRANCH, report, ref=p["branch"],
                                pr=pulls[0] if pulls else None, job_id=ctx.job.id,
                                threshold=repo.config.regression)
    log.info("job %s: %s@%s recorded (score %s)", ctx.job.id, p["repo"], p["sha"][:12],
             report.score)
    return Outcome.done(evaluation=evaluation, sha=p["sha"], pr=pulls[0] if pulls else None,
                        score=report.score, status=report.status.value)


def _evaluate(ctx: JobContext, repo):
    c = ctx.config
    options = EvalOptions(device=c.device, device_index=ctx.gpu_index, launcher=sandbox_launcher(
        c.sandbox, c.runner_image, c.sandbox_memory, c.sandbox_cpus, c.sandbox_pids))
    plan = {op.name: [CandidateRef("head", op.path / op.kernel_file, repo.root)]
            for op in repo.ops}
    evaluate = ctx.runtime.evaluate or _runner_evaluate()
    return evaluate(repo, plan, options, None)["head"]


def _runner_evaluate():
    from atrex.runner.evaluate import evaluate

    return evaluate


def give_up(ctx: JobContext, error: str) -> None:
    last = error.strip().splitlines()[-1][:300] if error.strip() else "unknown error"
    log.error("job %s: evaluating %s@%s failed: %s", ctx.job.id, ctx.payload["repo"],
              ctx.payload["sha"][:12], last)
