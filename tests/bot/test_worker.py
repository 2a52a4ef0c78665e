"""Worker lanes in-process: job kinds, the agent hook, superseded commits, giving up, regression.

The GitHub side is the real client against the fake; the runner's `evaluate` is replaced where a
test needs GPU-like numbers (a CPU cannot time), through `Runtime.evaluate`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from atrex.bot.app import open_store
from atrex.bot.github import GitHubApp
from atrex.bot.jobs import OptimizeRequest, Runtime, Task
from atrex.bot.newjobs import command_job, evaluate_job, optimize_job
from atrex.bot.store import DONE, FAILED, SqlStore
from atrex.bot.worker import Lane, lanes_for
from atrex.runner.model import DeviceInfo, OpResult, Peaks, Report, ShapeResult, Status

from .world import KernelRepo, git

REPO = "octo/kernels"


@pytest.fixture
def kernels(fake, tmp_path):
    (tmp_path / "git").mkdir()
    repo = KernelRepo(tmp_path / "git", "kernels")
    fake.add_repo(REPO, str(repo.remote))
    repo.branch("tune")
    repo.touch_kernel("tuned")
    repo.push("tune")
    fake.add_pull(REPO, 1, "tune", author="alice")
    fake.set_permission(REPO, "maintainer", "write")
    return repo


def make_runtime(config, **changes) -> Runtime:
    app = GitHubApp(config)
    store = changes.pop("store", None) or open_store(config)
    return Runtime(config=config, store=store, repo_api=app.repo, token=app.tokens.token,
                   github_client=app.client, **changes)


@pytest.fixture
def config(config):
    config.data_dir.mkdir(parents=True, exist_ok=True)
    return config


def drain(runtime: Runtime, gpus=(0,)) -> None:
    lanes = lanes_for(runtime, gpus, light=True)
    while any(lane.run_once() for lane in lanes):
        pass


def timed_report(fraction: float) -> Report:
    device = DeviceInfo(kind="cuda", name="NVIDIA H200", gpu_key="h200_sxm", driver="570",
                        torch="2.11", triton="3.6", peaks=Peaks("datasheet", {"bf16": 989.4}, 4.8))
    shape = ShapeResult(id="decode-64", status=Status.PASS, time_ms=0.01 / fraction, sol_ms=0.01,
                        roofline_fraction=fraction, own_kernel_share=1.0)
    op = OpResult(name="rmsnorm", status=Status.PASS, score=fraction, own_kernel_share=1.0,
                  importance=1.0, gpu_hours_at_stake=0.1, shapes=[shape])
    return Report(device=device, ops=[op], timing_available=True, score=fraction,
                  gpu_hours_at_stake=0.1)


def test_regression_past_the_repository_threshold_fails_the_check(fake, config, kernels):
    calls = []

    def evaluate(repo, plan, options, progress=None):
        calls.append((sorted(plan), [c.label for c in plan["rmsnorm"]], options))
        return {"head": timed_report(0.30), "base": timed_report(0.40)}

    runtime = make_runtime(config, evaluate=evaluate)
    sha = fake.sha(REPO, "tune")
    runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="test"))
    drain(runtime)
    assert calls == [(["rmsnorm"], ["head", "base"], calls[0][2])]
    assert calls[0][2].device == "cpu" and calls[0][2].device_index == 0
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == "failure" and "regression" in run["output"]["summary"]
    [comment] = fake.comments_on(REPO, 1)
    assert "0.400 → 0.300" in comment["body"] and "regression -25.0% (threshold 5%)" in \
        comment["body"] and "xychart-beta" in comment["body"]


def many_ops_report(count: int, fraction: float) -> Report:
    report = timed_report(fraction)
    template = report.ops[0]
    report.ops = [OpResult(name=f"operator_{i:04d}", status=Status.PASS, score=fraction,
                           own_kernel_share=1.0, importance=1 / count, gpu_hours_at_stake=0.1,
                           shapes=template.shapes) for i in range(count)]
    return report


def test_a_huge_report_fits_githubs_byte_limits(fake, config, kernels):
    """800 operators with ✅, →, Δ and 🚀 in every row: over GitHub's limits in bytes (not in
    characters). The byte-counting fake accepts what the bot sends, and the texts say what was
    left out and where the rest is."""
    def evaluate(repo, plan, options, progress=None):
        return {"head": many_ops_report(800, 0.5), "base": many_ops_report(800, 0.4)}

    runtime = make_runtime(config, evaluate=evaluate)
    sha = fake.sha(REPO, "tune")
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    drain(runtime)
    assert runtime.store.get(job_id).state == DONE, runtime.store.get(job_id).error
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == "success"
    summary, text = run["output"]["summary"], run["output"]["text"]
    assert len(summary.encode()) <= 65535 and len(text.encode()) <= 65535
    assert "rows of the operator table" in summary and "rows of the shape table" in text
    assert f"`atrex job-report {job_id}`" in summary
    [comment] = fake.comments_on(REPO, 1)
    assert len(comment["body"].encode()) <= 65536
    [note] = [line for line in comment["body"].splitlines() if line.startswith("**Left out")]
    assert f"[the check run]({run['html_url']})" in note


def test_a_superseded_commit_is_skipped(fake, config, kernels):
    runtime = make_runtime(config, evaluate=lambda *a, **k: pytest.fail("evaluated"))
    old = fake.sha(REPO, "tune")
    runtime.store.enqueue(evaluate_job(REPO, 1, 1, old, fork=False, reason="test"))
    light = Lane(runtime, ["light"], "light")
    assert light.run_once()  # announce the old commit
    new = kernels.touch_kernel("newer")
    kernels.push("tune")
    runtime.store.enqueue(evaluate_job(REPO, 1, 1, new, fork=False, reason="test"))
    gpu = Lane(runtime, ["gpu"], "gpu0")
    assert gpu.run_once()
    [run] = fake.runs_for(REPO, old)
    assert run["conclusion"] == "skipped" and run["output"]["title"] == "Superseded"


def test_a_job_that_keeps_killing_workers_is_reported_failed(fake, config, kernels):
    config = config.with_(max_attempts=2)
    runtime = make_runtime(config)
    sha = fake.sha(REPO, "tune")
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    assert Lane(runtime, ["light"], "light").run_once()
    for attempt in (1, 2):  # two workers die on it: claim, then vanish without a word
        assert runtime.store.claim(["gpu"], f"dead{attempt}", lease_s=0.01)
        time.sleep(0.05)
    assert Lane(runtime, ["gpu"], "gpu0").run_once()
    job = runtime.store.get(job_id)
    assert job.state == FAILED and "stopped 2 times" in job.error
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == "failure" and "could not evaluate" in run["output"]["title"]


def test_transient_errors_are_retried_then_reported(fake, config, kernels):
    config = config.with_(max_attempts=2, retry_backoff_s=0)
    attempts = []

    def evaluate(*args, **kwargs):
        attempts.append(1)
        raise RuntimeError("the GPU fell off the bus")

    runtime = make_runtime(config, evaluate=evaluate)
    sha = fake.sha(REPO, "tune")
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    drain(runtime)
    assert len(attempts) == 2
    job = runtime.store.get(job_id)
    assert job.state == FAILED and "fell off the bus" in job.error
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == "failure" and "fell off the bus" in run["output"]["summary"]


def test_malformed_kernel_repository_fails_with_the_format_error(fake, config, kernels):
    kernels.commit("break shapes", {"ops/rmsnorm/shapes.json": "{not json"})
    kernels.push("tune")
    runtime = make_runtime(config)
    sha = fake.sha(REPO, "tune")
    runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    drain(runtime)
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == "failure" and "shapes.json" in run["output"]["summary"]
    [comment] = fake.comments_on(REPO, 1)
    assert "could not be evaluated" in comment["body"]


def test_optimize_calls_the_injected_agent(fake, config, kernels):
    seen: list[OptimizeRequest] = []

    def agent(request: OptimizeRequest):
        seen.append(request)
        assert (Path(request.workdir) / "ops" / "rmsnorm" / "kernel.py").is_file()
        assert request.token().startswith("ghs_")
        assert request.github.get_repo(REPO).get_pull(1).number == 1
        return {"summary": "Opened octo/kernels#2: rmsnorm 0.41 -> 0.63", "pr_url": "u"}

    runtime = make_runtime(config, optimize_runner=agent)
    comment = fake.add_comment(REPO, 1, "maintainer", "/atrex optimize rmsnorm")
    runtime.store.enqueue(command_job(REPO, 1, 1, comment["id"], "maintainer", "optimize",
                                      ["rmsnorm"], None))
    drain(runtime)
    [request] = seen
    assert request.ops == ["rmsnorm"] and request.head_sha == fake.sha(REPO, "tune")
    assert request.requested_by == "maintainer" and request.head_ref == "tune"
    [job] = runtime.store.list(kind="optimize")
    assert job.state == DONE and job.result == {"pr_url": "u"}
    assert any("Opened octo/kernels#2" in c["body"] for c in fake.comments_on(REPO, 1))
    assert fake.reactions_on(comment["id"]) == ["eyes", "+1", "rocket"]


def test_dispatch_by_kind_is_extensible():
    from atrex.bot.jobs import JobContext, Outcome, dispatch

    registry = {"schedule": Task(run=lambda ctx: Outcome.done(ran=ctx.job.kind),
                                 give_up=lambda ctx, error: None)}
    job = type("J", (), {"kind": "schedule"})()
    ctx = JobContext(runtime=None, job=job, owner="o", lease=None)
    assert dispatch(ctx, registry) == Outcome.done(ran="schedule")


def test_optimize_job_key_dedupes_while_pending(config):
    store = SqlStore(config.db_url)
    first = store.enqueue(optimize_job(REPO, 1, 1, "a" * 40, ["b", "a"], 5, "m"))
    assert store.enqueue(optimize_job(REPO, 1, 1, "a" * 40, ["a", "b"], 6, "m")) == (
        first[0], False)


def test_a_worker_that_lost_its_lease_publishes_nothing(fake, config, kernels):
    from atrex.bot.store import jobs
    from sqlalchemy import update

    def evaluate(repo, plan, options, progress=None):
        with runtime.store.engine.begin() as conn:  # another worker took the job over
            conn.execute(update(jobs).values(lease_owner="thief"))
        time.sleep(4 * config.heartbeat_s)  # long enough for a heartbeat to notice
        return {"head": timed_report(0.5), "base": timed_report(0.4)}

    runtime = make_runtime(config, evaluate=evaluate)
    sha = fake.sha(REPO, "tune")
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    drain(runtime)
    [run] = fake.runs_for(REPO, sha)
    assert run["status"] == "in_progress" and fake.comments_on(REPO, 1) == []
    job = runtime.store.get(job_id)
    assert job.state == "running" and job.lease_owner == "thief"


def test_force_pushed_commit_is_skipped_and_fetch_failures_retried(fake, config, kernels):
    config = config.with_(max_attempts=2, retry_backoff_s=0)
    runtime = make_runtime(config, evaluate=lambda *a, **k: pytest.fail("evaluated"))
    gone = kernels.touch_kernel("force-pushed away")  # pushed, then the branch was reset:
    kernels.push("tune")  # GitHub keeps the commit (a check run on it is accepted), but the
    git(kernels.work, "reset", "--hard", "HEAD~1")  # branch no longer leads to it
    kernels.push("tune")
    runtime.store.enqueue(evaluate_job(REPO, 1, 1, gone, fork=False, reason="t"))
    drain(runtime)
    [run] = fake.runs_for(REPO, gone)
    assert run["conclusion"] == "skipped" and "no longer on the branch" in run["output"]["title"]

    fake.state.repos[REPO].clone_url = str(kernels.remote) + "-moved"  # fetches now fail
    sha = kernels.touch_kernel("unreachable")
    kernels.push("tune")
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    drain(runtime)
    job = runtime.store.get(job_id)
    assert job.state == FAILED and job.attempts == 2 and "git fetch failed" in job.error
    [run] = fake.runs_for(REPO, sha)
    assert run["conclusion"] == "failure" and "git fetch failed" in run["output"]["summary"]


def test_a_4xx_from_github_is_final_and_the_job_says_why(fake, config, kernels):
    """A 422 (and a 404) says the same however often it is asked: one attempt, no backoff,
    and the reason on the job, on the check run and in the reply."""
    runtime = make_runtime(config.with_(max_attempts=3, retry_backoff_s=0))
    sha = fake.sha(REPO, "tune")
    fake.inject("POST", r"/repos/octo/kernels/check-runs$", 422, times=10,
                message="Validation Failed")
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    drain(runtime)
    job = runtime.store.get(job_id)
    assert job.state == FAILED and job.attempts == 1
    assert job.error.splitlines()[-1] == \
        "GitHub answered 422 (Validation Failed): final, not retried"
    assert len(fake.requests("POST", r"/check-runs$")) == 1  # nor retried by the HTTP layer

    comment = fake.add_comment(REPO, 1, "maintainer", "/atrex rerun")
    fake.inject("GET", r"/repos/octo/kernels/pulls/1$", 404, times=10, message="Not Found")
    job_id, _ = runtime.store.enqueue(command_job(REPO, 1, 1, comment["id"], "maintainer",
                                                  "rerun", [], None))
    drain(runtime)
    job = runtime.store.get(job_id)
    assert job.state == FAILED and job.attempts == 1
    assert "GitHub answered 404 (Not Found): final, not retried" in job.error
    replies = [c["body"] for c in fake.comments_on(REPO, 1, fake.bot_login)]
    assert any("GitHub answered 404 (Not Found): final, not retried" in r for r in replies)
    assert fake.reactions_on(comment["id"]) == ["eyes", "confused"]
    assert len(fake.requests("GET", r"/pulls/1$")) == 1


def test_a_rate_limit_is_retried_after_the_wait_github_asked_for(fake, config, kernels):
    runtime = make_runtime(config.with_(http_retries=0, retry_backoff_s=0.5))
    sha = fake.sha(REPO, "tune")
    fake.inject("POST", r"/repos/octo/kernels/check-runs$", 403, times=1,
                headers={"Retry-After": "120"}, message="You have exceeded a secondary rate "
                "limit. Please wait a few minutes before you try again.")
    job_id, _ = runtime.store.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    assert Lane(runtime, ["light"], "light").run_once()
    job = runtime.store.get(job_id)
    assert job.state == "queued" and job.attempts == 1 and "rate limit" in job.error
    assert job.not_before - time.time() > 100  # Retry-After, not the 0.5 s backoff


class TransitionWitness:
    """The store, plus what the job's run records held at each final transition."""

    def __init__(self, store):
        self._store = store
        self.seen: list[tuple[str, list[dict]]] = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def _witness(self, transition: str, job_id: int) -> None:
        records = self._store.effects_of(job_id, "run:")
        self.seen.append((transition, [json.loads(records[k]) for k in sorted(records)]))

    def complete(self, job_id, *args, **kwargs):
        self._witness("complete", job_id)
        return self._store.complete(job_id, *args, **kwargs)

    def fail(self, job_id, *args, **kwargs):
        self._witness("fail", job_id)
        return self._store.fail(job_id, *args, **kwargs)


@pytest.mark.parametrize("fails", [False, True])
def test_a_job_is_done_or_requeued_only_after_its_run_record_is_closed(fake, config, kernels,
                                                                       fails):
    """Whoever sees the job's new state (a dashboard, `atrex status`, a takeover check) finds
    the attempt that caused it ended: the end time is written first."""
    config = config.with_(max_attempts=2, retry_backoff_s=0)

    def evaluate(*args, **kwargs):
        if fails:
            raise RuntimeError("the GPU fell off the bus")
        return {"head": timed_report(0.40), "base": timed_report(0.40)}

    witness = TransitionWitness(open_store(config))
    runtime = make_runtime(config, evaluate=evaluate, store=witness)
    sha = fake.sha(REPO, "tune")
    job_id, _ = witness.enqueue(evaluate_job(REPO, 1, 1, sha, fork=False, reason="t"))
    drain(runtime)
    assert [t for t, _ in witness.seen] == (["fail", "fail"] if fails else ["complete"])
    for _, runs in witness.seen:
        assert runs and all("end" in run for run in runs), runs
    assert witness.get(job_id).state == (FAILED if fails else DONE)
