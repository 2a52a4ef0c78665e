"""The `[schedule]` table and the scheduler's decisions (in-process, a SQLite store on disk)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from atrex.bot.newjobs import SCHEDULED
from atrex.bot.schedule import Schedule, schedule_from_text
from atrex.bot.scheduler import (
    ALREADY,
    BUSY,
    ENQUEUED,
    ERROR,
    INVALID,
    NOT_OPTED_IN,
    Scheduler,
    run_once,
)
from atrex.bot.store import SqlStore
from atrex.runner.errors import FormatError

DAY = 86400.0
OPTED_IN = '[repo]\nops_root = "ops"\n\n[schedule]\nenabled = true\nevery_hours = 24\n'


def test_schedule_table_defaults_and_values():
    assert schedule_from_text(None) == Schedule()
    assert not schedule_from_text('[repo]\nops_root = "."\n').enabled
    s = schedule_from_text('[schedule]\nenabled = true\nevery_hours = 6\nmax_prs = 2\n'
                           'ops = ["rmsnorm", "softmax", "rmsnorm"]\n')
    assert (s.enabled, s.every_hours, s.max_prs, s.ops) == (True, 6.0, 2, ("rmsnorm", "softmax"))
    assert s.period(6 * 3600 * 10 + 5) == 10 and s.allows("softmax") and not s.allows("gemm")
    assert schedule_from_text("[schedule]\nenabled = true\n").allows("anything")


@pytest.mark.parametrize("body, field, words", [
    ("enabled = 1", "schedule.enabled", "true or false"),
    ('every_hours = "daily"', "schedule.every_hours", "must be a number"),
    ("every_hours = 0.5", "schedule.every_hours", "at least 1"),
    ("max_prs = 0", "schedule.max_prs", "at least 1"),
    ("max_prs = 1.5", "schedule.max_prs", "integer"),
    ('ops = "rmsnorm"', "schedule.ops", "list of operator names"),
    ("ops = []", "schedule.ops", "at least one"),
    ("cron = '0 3 * * *'", "schedule.cron", "unknown key"),
])
def test_schedule_table_errors_name_the_field(body, field, words):
    with pytest.raises(FormatError) as caught:
        head = "" if body.startswith("enabled") else "enabled = true\n"
        schedule_from_text(f"[schedule]\n{head}{body}\n")
    assert caught.value.field == field and words in caught.value.message


def test_schedule_must_be_a_table():
    with pytest.raises(FormatError, match="schedule: must be a table"):
        schedule_from_text('schedule = "daily"\n')


class Repos:
    """repo_api(installation, name) for run_once: atrex.toml texts (or an exception) per repo."""

    def __init__(self, texts: dict):
        self.texts = texts
        self.reads: list[str] = []

    def __call__(self, installation_id: int, repo: str):
        def file_text(path: str):
            self.reads.append(repo)
            value = self.texts[repo]
            if isinstance(value, Exception):
                raise value
            return value

        return SimpleNamespace(file_text=file_text)


@pytest.fixture
def store(tmp_path):
    store = SqlStore(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield store
    store.close()


def _actions(decisions) -> dict[str, str]:
    return {d.repo: d.action for d in decisions}


def test_run_once_enqueues_opted_in_repos_once_per_period(store, tmp_path):
    store.add_repos(1, "octo", ["octo/sched", "octo/plain", "octo/none", "octo/off",
                                "octo/bad", "octo/down"])
    repos = Repos({"octo/sched": OPTED_IN, "octo/plain": '[repo]\nops_root = "ops"\n',
                   "octo/none": None, "octo/off": "[schedule]\nenabled = false\n",
                   "octo/bad": "[schedule]\nenabled = true\nmax_prs = -1\n",
                   "octo/down": RuntimeError("502 Bad Gateway")})
    now = 100 * DAY + 3600
    first = run_once(store, repos, now)
    assert _actions(first) == {"octo/sched": ENQUEUED, "octo/plain": NOT_OPTED_IN,
                               "octo/none": NOT_OPTED_IN, "octo/off": NOT_OPTED_IN,
                               "octo/bad": INVALID, "octo/down": ERROR}
    bad = next(d for d in first if d.repo == "octo/bad")
    assert "schedule.max_prs" in bad.detail and "502" in next(
        d for d in first if d.repo == "octo/down").detail
    [job] = store.list(kind=SCHEDULED)
    assert job.payload == {"repo": "octo/sched", "installation_id": 1, "every_hours": 24.0,
                           "period": 100} and job.queue == "gpu"

    # later in the same period, and after a restart (a new store on the same file): nothing new
    assert _actions(run_once(store, repos, now + 3600))["octo/sched"] == ALREADY
    restarted = SqlStore(store.url)
    assert _actions(run_once(restarted, repos, now + 7200))["octo/sched"] == ALREADY
    restarted.close()
    assert len(store.list(kind=SCHEDULED)) == 1

    # the next period while the first run is still queued: no pile-up
    assert _actions(run_once(store, repos, now + DAY))["octo/sched"] == BUSY
    claimed = store.claim(["gpu"], "w", 60)
    store.complete(claimed.id, "w", {"prs": []})
    later = run_once(store, repos, now + DAY)
    assert _actions(later)["octo/sched"] == ENQUEUED
    assert [j.payload["period"] for j in store.list(kind=SCHEDULED)] == [100, 101]
    assert "enqueued (job" in next(d for d in later if d.repo == "octo/sched").line()


def test_scheduler_thread_ticks_until_stopped(store):
    store.add_repos(1, "octo", ["octo/sched"])
    repos = Repos({"octo/sched": OPTED_IN})
    stop = threading.Event()
    scheduler = Scheduler(store, repos, interval_s=0.05, clock=lambda: 5 * DAY).start(stop)
    deadline = threading.Event()
    while scheduler.ticks < 3 and not deadline.wait(0.02):
        pass
    scheduler.stop()
    assert scheduler.ticks >= 3 and len(repos.reads) >= 3
    assert len(store.list(kind=SCHEDULED)) == 1  # one period, one job, however many ticks
