"""Scale-out: the bot's jobs on Celery with Redis, the job store still the record of what happened.

```
atrex serve ──records jobs──▶ job store (SQL) ◀──claim by id / lease / effects── workers
                                   │ dispatcher (a thread in every worker): runnable job ids
                                   ▼
                        Redis: atrex.light, atrex.gpu.<kind> ──▶ atrex worker --engine celery
```

* The web process is unchanged: it records deliveries and jobs in the store and never talks to the
  broker, so intake stays fast and a broker outage loses nothing.
* A **dispatcher** thread in each worker process publishes the ids of runnable jobs (queued and
  due, or running under an expired lease: a dead worker's) to the queue of their lane: light jobs
  to `atrex.light`, GPU jobs to `atrex.gpu.<kind>`, where the kind is the `[repo] gpu` of the
  head commit's atrex.toml (default h200_sxm). A compare-and-set mark in the store means one
  publication per job state, from whichever dispatcher wins; a mark older than `redispatch_s`
  (a message the broker lost) is published again.
* A **worker** consumes one lane's queue: a GPU worker one `atrex.gpu.<kind>` queue with one job at
  a time (solo pool, prefetch 1, late acknowledgement, rejected back to the queue when the worker is
  lost), a light worker `atrex.light` with a few threads. For each job id it claims that job in
  the store (`claim_job`: only if runnable, with a lease) and runs it exactly like the embedded
  worker does (`Lane.run_claimed`): leases, heartbeats and the effects table keep every GitHub
  effect to one, so a duplicate or late message is a no-op.
* Redis' visibility timeout (ATREX_VISIBILITY_TIMEOUT_S) is longer than the longest job, so a
  running job's message is not handed to a second worker; when a worker dies (`kill -9`), its store
  lease expires after ATREX_LEASE_S and the dispatcher publishes the job again for a live worker.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass

from .config import BotConfig, ConfigError
from .jobs import Runtime
from .newjobs import GPU, LIGHT
from .store import QUEUED, RUNNING, Job, SqlStore
from .worker import Lane

log = logging.getLogger(__name__)

TASK = "atrex.run_job"
LIGHT_QUEUE = "atrex.light"
DEFAULT_GPU_KIND = "h200_sxm"  # runner.config.RepoConfig's default [repo] gpu
MARK = "celery:published"
KIND = "gpu_kind"


def gpu_queue(kind: str) -> str:
    return f"atrex.gpu.{kind}"


def celery_app(config: BotConfig):
    """A Celery app on the configured broker, with the delivery guarantees the bot relies on."""
    if config.engine != "celery" or not config.broker_url:
        raise ConfigError("ATREX_BROKER_URL", "required with ATREX_ENGINE=celery "
                          "(e.g. redis://broker:6379/0)")
    from celery import Celery

    app = Celery("atrex", broker=config.broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": int(config.visibility_timeout_s)},
        task_default_queue=LIGHT_QUEUE, task_ignore_result=True, task_serializer="json",
        accept_content=["json"], broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False, worker_send_task_events=False,
        task_track_started=False, enable_utc=True)
    return app


# --- routing ---------------------------------------------------------------------------------

def route(job: Job, gpu_kind: Callable[[Job], str | None]) -> str | None:
    """The broker queue of a job's lane; None while its GPU kind is unknown (try again later)."""
    if job.queue == LIGHT:
        return LIGHT_QUEUE
    if job.queue == GPU:
        kind = gpu_kind(job)
        return gpu_queue(kind) if kind else None
    raise ValueError(f"job {job.id}: unknown queue {job.queue!r}")


def kind_from_toml(text: str | None) -> str:
    if text is None:
        return DEFAULT_GPU_KIND
    try:
        repo = tomllib.loads(text).get("repo", {})
    except tomllib.TOMLDecodeError:
        return DEFAULT_GPU_KIND  # the evaluation reports the malformed file
    kind = repo.get("gpu") if isinstance(repo, dict) else None
    return kind if isinstance(kind, str) and kind.strip() else DEFAULT_GPU_KIND


def repo_gpu_kind(runtime: Runtime) -> Callable[[Job], str | None]:
    """The `[repo] gpu` of the job's head commit (atrex.toml through the contents API), cached in
    the job's effects; None when GitHub cannot be asked right now."""

    def resolve(job: Job) -> str | None:
        known = runtime.store.effect(job.id, KIND)
        if known is not None:
            return known
        try:
            kind = kind_from_toml(_read_file(runtime, job.payload, "atrex.toml"))
        except Exception as exc:  # noqa: BLE001 - GitHub unreachable: route on a later sweep
            log.warning("job %s: cannot read atrex.toml yet: %s", job.id, exc)
            return None
        runtime.store.set_effect(job.id, KIND, kind)
        return kind

    return resolve


def _read_file(runtime: Runtime, payload: dict, path: str) -> str | None:
    from github import GithubException

    gh = runtime.github_client(payload["installation_id"])
    try:
        content = gh.get_repo(payload["repo"], lazy=True).get_contents(
            path, ref=payload["head_sha"])
    except GithubException as exc:
        if exc.status == 404:
            return None
        raise
    return content.decoded_content.decode()


# --- the dispatcher -----------------------------------------------------------------------------

@dataclass
class Dispatcher:
    """Publishes runnable jobs' ids to their queues, once per job state (see the module doc)."""

    store: SqlStore
    publish: Callable[[int, str], None]  # (job id, queue)
    gpu_kind: Callable[[Job], str | None]
    redispatch_s: float
    clock: Callable[[], float] = time.time

    def sweep(self) -> int:
        published = 0
        for job in self.store.dispatchable():
            if self._offer(job):
                published += 1
        return published

    def _offer(self, job: Job) -> bool:
        version = job_version(job)
        current = self.store.effect(job.id, MARK)
        mark = json.loads(current) if current else None
        fresh = mark is not None and self.clock() - mark["at"] < self.redispatch_s
        if mark is not None and mark["version"] == version and fresh:
            return False
        queue = route(job, self.gpu_kind)
        if queue is None:
            return False
        value = json.dumps({"version": version, "queue": queue, "at": self.clock()})
        if not self.store.swap_effect(job.id, MARK, current, value):
            return False  # another dispatcher published it
        self.publish(job.id, queue)
        log.info("job %s (%s) -> %s", job.id, job.kind, queue)
        return True

    def run_forever(self, stop: threading.Event, interval: float) -> None:
        while not stop.is_set():
            try:
                self.sweep()
            except Exception:  # the store or the broker is unreachable: try again
                log.exception("dispatch failed")
            stop.wait(interval)


def job_version(job: Job) -> str:
    """Changes whenever a job needs a new message: a new stage, a retry, a dead worker's lease."""
    if job.state == RUNNING:
        return f"lease:{job.queue}:{job.lease_expires}"
    return f"queued:{job.queue}:{job.attempts}:{job.updated_at}"


def celery_publisher(app) -> Callable[[int, str], None]:
    def publish(job_id: int, queue: str) -> None:
        app.send_task(TASK, args=[job_id], queue=queue, routing_key=queue)

    return publish


# --- the worker side ----------------------------------------------------------------------------

def run_job_id(lane: Lane, job_id: int) -> str:
    """Claim this job in the store and run it; a message for a job that is not runnable (done,
    running under a live lease, another lane's) is a no-op."""
    store, config = lane.runtime.store, lane.runtime.config
    job = store.claim_job(job_id, lane.queues, lane.owner, config.lease_s)
    if job is None:
        current = store.get(job_id)
        if current is not None and current.state == QUEUED:
            store.clear_effect(job_id, MARK)  # not runnable yet: the dispatcher publishes again
        return "skipped"
    lane.run_claimed(job)
    return "ran"


def register_task(app, lane: Lane) -> None:
    @app.task(name=TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
    def run_job(job_id: int) -> str:
        return run_job_id(lane, int(job_id))


@dataclass(frozen=True)
class WorkerPlan:
    lane: Lane
    queue: str
    pool: str
    concurrency: int
    node: str


def plan_worker(runtime: Runtime, gpu: int | None, gpu_kind: str | None) -> WorkerPlan:
    """One lane per worker process: a GPU (one job at a time) or the light lane."""
    config, host = runtime.config, socket.gethostname()
    if gpu is None:
        return WorkerPlan(Lane(runtime, [LIGHT], "light"), LIGHT_QUEUE, "threads",
                          config.light_threads, f"atrex-light@{host}")
    kind = gpu_kind or config.gpu_kind
    if not kind:
        raise ConfigError("ATREX_GPU_KIND", "a Celery GPU worker serves one GPU kind: "
                          "--gpu-kind KIND (e.g. h200_sxm)")
    return WorkerPlan(Lane(runtime, [GPU], f"gpu{gpu}", gpu_index=gpu), gpu_queue(kind), "solo",
                      1, f"atrex-{kind}-gpu{gpu}@{host}")


def run_celery_worker(runtime: Runtime, gpu: int | None, gpu_kind: str | None,
                      app=None) -> int:
    """Serve one lane from the broker, with a dispatcher thread beside it."""
    config = runtime.config
    app = app or celery_app(config)
    plan = plan_worker(runtime, gpu, gpu_kind)
    register_task(app, plan.lane)
    stop = threading.Event()
    dispatcher = Dispatcher(runtime.store, celery_publisher(app), repo_gpu_kind(runtime),
                            config.redispatch_s)
    threading.Thread(target=dispatcher.run_forever, args=(stop, config.poll_s),
                     name="dispatcher", daemon=True).start()
    log.info("celery worker %s: queue %s", plan.node, plan.queue)
    try:
        app.worker_main(["worker", "--queues", plan.queue, "--pool", plan.pool,
                         "--concurrency", str(plan.concurrency), "--hostname", plan.node,
                         "--prefetch-multiplier", "1", "--without-gossip", "--without-mingle",
                         "--loglevel", "INFO"])
    finally:
        stop.set()
    return 0


# --- status ------------------------------------------------------------------------------------

def served_queues(app, timeout: float = 1.0) -> set[str] | None:
    """Queues some live worker consumes (None when no worker answered in time)."""
    replies = app.control.inspect(timeout=timeout).active_queues() or {}
    return {q["name"] for queues in replies.values() for q in queues} if replies else None
