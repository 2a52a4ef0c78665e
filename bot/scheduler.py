"""Scheduled optimization: which installed repositories are due, and a durable job for each.

`run_once` reads each installed repository's `atrex.toml` (default branch, contents API), and for a
repository that opts in (`[schedule] enabled = true`) records one `scheduled_optimize` job for the
current period. The job's dedupe key is (repository, period length, period number), so running
`run_once` again in the same period (a restart, a second worker, cron and the worker's thread
together) records nothing new. A repository whose previous scheduled job is still queued or running
gets no second one. The job itself (evaluate the default branch, rank, run the agent) runs on a GPU
lane: see `atrex.bot.tasks.scheduled`.

`Scheduler` calls `run_once` every `interval_s` seconds in a thread of the worker process;
`atrex schedule run-once` calls it once (for cron).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from atrex.runner.config import CONFIG_NAME
from atrex.runner.errors import FormatError

from .newjobs import SCHEDULED, scheduled_group, scheduled_job
from .schedule import schedule_from_text
from .store import SqlStore

log = logging.getLogger(__name__)

ENQUEUED, ALREADY, BUSY, NOT_OPTED_IN, INVALID, ERROR = (
    "enqueued", "already enqueued", "previous run still active", "not opted in",
    "invalid schedule", "error")


@dataclass(frozen=True)
class Decision:
    repo: str
    action: str
    detail: str = ""
    job_id: int | None = None

    def line(self) -> str:
        job = f" (job {self.job_id})" if self.job_id is not None else ""
        return f"{self.repo}: {self.action}{job}" + (f": {self.detail}" if self.detail else "")


def run_once(store: SqlStore, repo_api: Callable[[int, str], object],
             now: float | None = None) -> list[Decision]:
    """Record the due scheduled jobs of every installed repository; one decision per repo."""
    now = time.time() if now is None else now
    decisions = []
    for repo, installation_id in store.installed_repos().items():
        decision = _decide(store, repo_api, repo, installation_id, now)
        log.info("schedule: %s", decision.line())
        decisions.append(decision)
    return decisions


def _decide(store: SqlStore, repo_api, repo: str, installation_id: int, now: float) -> Decision:
    try:
        text = repo_api(installation_id, repo).file_text(CONFIG_NAME)
    except Exception as exc:  # one unreachable repository must not stop the others
        return Decision(repo, ERROR, f"cannot read {CONFIG_NAME}: {_short(exc)}")
    try:
        schedule = schedule_from_text(text)
    except FormatError as exc:
        where = f"{exc.field}: " if exc.field else ""
        return Decision(repo, INVALID, f"{CONFIG_NAME}: {where}{exc.message}")
    if not schedule.enabled:
        return Decision(repo, NOT_OPTED_IN)
    job = scheduled_job(repo, installation_id, schedule.every_hours, schedule.period(now))
    known = store.by_key(job.dedupe_key)
    if known is not None:
        return Decision(repo, ALREADY, f"period {job.payload['period']}", known.id)
    active = store.active_in_group(scheduled_group(repo), SCHEDULED)
    if active is not None:
        return Decision(repo, BUSY, "", active.id)
    job_id, created = store.enqueue(job)
    return Decision(repo, ENQUEUED if created else ALREADY, f"period {job.payload['period']}",
                    job_id)


def _short(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


class Scheduler:
    """`run_once` every `interval_s` seconds in a daemon thread, first at start."""

    def __init__(self, store: SqlStore, repo_api: Callable[[int, str], object],
                 interval_s: float, clock: Callable[[], float] = time.time):
        self._store, self._repo_api = store, repo_api
        self._interval_s, self._clock = interval_s, clock
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self._stop = threading.Event()
        self.ticks = 0

    def start(self, stop: threading.Event | None = None) -> Scheduler:
        if stop is not None:
            self._stop = stop
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                run_once(self._store, self._repo_api, self._clock())
            except Exception:  # the store was unreachable: try again next time
                log.exception("schedule: run failed")
            self.ticks += 1
            self._stop.wait(self._interval_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
