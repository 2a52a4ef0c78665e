"""Workers: claim a job, keep its lease alive, run it, record the outcome.

A worker process runs lanes in threads: one *light* lane (GitHub-only jobs) and one *GPU* lane per
GPU index it serves; each lane runs one job at a time, so a GPU never holds two jobs (the runner
also takes a per-GPU file lock while it evaluates). If the process dies (`kill -9`), its leases
expire and another worker (or this one restarted) takes the jobs again; the effects a job already
made are not repeated (see `effects`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from .app import open_store
from .config import BotConfig
from .github import GitHubApp, final_answer, retry_after_s
from .jobs import (
    JobContext,
    LeaseLost,
    OptimizeRunner,
    Runtime,
    dispatch,
    give_up,
    load_optimize_runner,
)
from .newjobs import GPU, LIGHT
from .scheduler import Scheduler
from .store import Job

log = logging.getLogger(__name__)

Settle = Callable[[], object]  # a job's final store transition, taken after its run is on record


class Heartbeat:
    """Renews a job's lease every `interval` seconds in a background thread."""

    def __init__(self, store, job: Job, owner: str, lease_s: float, interval: float):
        self._store, self._job, self._owner = store, job, owner
        self._lease_s, self._interval = lease_s, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{job.id}",
                                        daemon=True)
        self.lost = False

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if not self._store.heartbeat(self._job.id, self._owner, self._lease_s):
                    self.lost = True
                    log.warning("job %s: lease lost", self._job.id)
                    return
            except Exception:  # a busy database must not kill the heartbeat: try again
                log.exception("job %s: heartbeat failed", self._job.id)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Lane:
    runtime: Runtime
    queues: list[str]
    name: str
    gpu_index: int = 0

    @property
    def owner(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}:{self.name}"

    def run_once(self) -> bool:
        """Claim and run one job; False when there was nothing to do."""
        config, store = self.runtime.config, self.runtime.store
        job = store.claim(self.queues, self.owner, config.lease_s)
        if job is None:
            return False
        self.run_claimed(job)
        return True

    def run_claimed(self, job: Job) -> None:
        """Run a job this lane holds the lease of (claimed here or by a distributed engine)."""
        config, store = self.runtime.config, self.runtime.store
        log.info("%s: job %s (%s, attempt %s)", self.name, job.id, job.kind, job.attempts)
        record = run_record(self, job)
        store.set_effect(job.id, record.name, json.dumps(record.value))
        with Heartbeat(store, job, self.owner, config.lease_s, config.heartbeat_s) as beat:
            ctx = JobContext(self.runtime, job, self.owner, beat, gpu_index=self.gpu_index)
            try:
                settle = self._run(ctx)
            finally:
                store.set_effect(job.id, record.name, json.dumps(
                    {**record.value, "end": time.time()}))
            # the job's new state is written after its run record is closed: whoever sees the
            # job done or requeued finds the attempt that did it ended
            if settle is not None:
                settle()

    def _run(self, ctx: JobContext) -> Settle | None:
        """Run the job; what to record in the store comes back as a step to take once the run
        record is closed (None: nothing, e.g. the lease went to another worker)."""
        store, job = ctx.store, ctx.job
        if job.exhausted:
            error = f"the worker running this job stopped {job.attempts - 1} times"
            self._give_up(ctx, error)
            return lambda: store.fail(job.id, self.owner, error)
        try:
            outcome = dispatch(ctx)
        except LeaseLost as exc:
            log.warning("%s", exc)  # the new owner finishes the job; nothing to record here
            return None
        except Exception as exc:
            return self._failed(ctx, exc)
        if outcome.action == "complete":
            return lambda: store.complete(job.id, self.owner, outcome.result)
        if outcome.action == "failed":
            return lambda: store.fail(job.id, self.owner, outcome.error or "failed")
        return None

    def _failed(self, ctx: JobContext, exc: Exception) -> Settle:
        """Try again later what can succeed later (5xx, rate limits: after the Retry-After
        GitHub asked for); a final answer (a 4xx) fails the job now, and says so: the reason is
        the error's last line (what the check run and the replies show)."""
        job, store = ctx.job, ctx.store
        error = "".join(traceback.format_exception(exc))
        final = final_answer(exc)
        log.warning("job %s failed (attempt %s/%s): %s%s", job.id, job.attempts,
                    job.max_attempts, exc, f" ({final})" if final else "")
        if final is not None:
            error = f"{error.rstrip()}\n{final}"
            self._give_up(ctx, error)
            return lambda: store.fail(job.id, self.owner, error)
        if job.attempts >= job.max_attempts:
            self._give_up(ctx, error)
        retry_in = max(ctx.config.retry_backoff_s, retry_after_s(exc))
        return lambda: store.fail(job.id, self.owner, error, retry_in=retry_in)

    def _give_up(self, ctx: JobContext, error: str) -> None:
        try:
            give_up(ctx, error)
        except Exception:
            log.exception("job %s: reporting the failure failed too", ctx.job.id)

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                busy = self.run_once()
            except Exception:  # the store was unreachable: wait and try again
                log.exception("%s: claim failed", self.name)
                busy = False
            if not busy:
                stop.wait(self.runtime.config.poll_s)


@dataclass(frozen=True)
class RunRecord:
    name: str
    value: dict


def run_record(lane: Lane, job: Job) -> RunRecord:
    """Who ran which attempt of a job, on which GPU, when: `run:<attempt>` in the job's effects
    (the audit trail of scale-out: which worker, one job per GPU at a time)."""
    return RunRecord(f"run:{job.attempts}", {
        "owner": lane.owner, "lane": lane.name, "queue": job.queue,
        "gpu_index": lane.gpu_index if lane.name != "light" else None, "start": time.time()})


def bundled_agent(config: BotConfig, timer=None):
    """The agent bridge (`atrex.bot.agent_bridge.AgentBridge`), or None when the agent is not
    installed. `timer` is the agent's test seam: only test harnesses pass one."""
    try:
        from .agent_bridge import AgentBridge
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name.split(".")[0] == "openai" or
                         exc.name.startswith("atrex.agent")):
            log.warning("the agent is not installed (%s): /atrex optimize and scheduled runs "
                        "are off", exc.name)
            return None
        raise
    return AgentBridge(config, timer=timer)


def build_runtime(config: BotConfig, optimize_runner: OptimizeRunner | None = None,
                  agent=None) -> Runtime:
    """The production dependencies: the job store, the GitHub App, the runner, and the agent:
    `agent` (an AgentBridge; default: the bundled one, if installed) runs scheduled jobs and,
    unless `optimize_runner` or ATREX_OPTIMIZE_RUNNER names another function (or `none`),
    `/atrex optimize`."""
    config.require("app_id", "private_key_path", "github_api_url")
    agent = agent or bundled_agent(config)
    if optimize_runner is None:
        optimize_runner = load_optimize_runner(config.optimize_runner)
    if optimize_runner is None and not config.optimize_runner and agent is not None:
        optimize_runner = agent.optimize
    app = GitHubApp(config)
    return Runtime(config=config, store=open_store(config), repo_api=app.repo,
                   token=app.tokens.token, github_client=app.client,
                   optimize_runner=optimize_runner,
                   scheduled_runner=agent.scheduled if agent is not None else None)


def lanes_for(runtime: Runtime, gpus: tuple[int, ...], light: bool) -> list[Lane]:
    lanes = [Lane(runtime, [LIGHT], "light")] if light else []
    lanes += [Lane(runtime, [GPU], f"gpu{index}", gpu_index=index) for index in gpus]
    return lanes


def _stop_on_signals(stop: threading.Event) -> None:
    """First SIGTERM/SIGINT: finish the running jobs, claim no more. Second: exit now (the
    leases of unfinished jobs expire and another worker takes them)."""

    def handle(signum, _frame) -> None:
        if stop.is_set():
            log.warning("second signal: exiting without finishing the running jobs")
            os._exit(128 + signum)
        log.info("signal %s: finishing running jobs, then exiting", signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handle)


def run_worker(config: BotConfig, gpus: tuple[int, ...] | None = None, light: bool = True,
               parent_pid: int | None = None,
               runtime_factory: Callable[[BotConfig], Runtime] = build_runtime) -> int:
    runtime = runtime_factory(config)
    lanes = lanes_for(runtime, config.gpus if gpus is None else gpus, light)
    stop = threading.Event()
    _stop_on_signals(stop)
    threads = [threading.Thread(target=lane.run_forever, args=(stop,), name=lane.name)
               for lane in lanes]
    for thread in threads:
        thread.start()
    if light and config.schedule_interval_s > 0:
        Scheduler(runtime.store, runtime.repo_api, config.schedule_interval_s).start(stop)
    log.info("worker %s: lanes %s", os.getpid(), ", ".join(lane.name for lane in lanes))
    while not stop.wait(1.0):
        if parent_pid is not None and os.getppid() != parent_pid:
            log.warning("parent %s is gone; stopping", parent_pid)
            stop.set()
    for thread in threads:
        thread.join()
    return 0
