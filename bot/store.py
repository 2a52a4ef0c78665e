"""The durable job store: what was delivered, what must run, who runs it, and what it already did.

The default engine is SQLite through SQLAlchemy (one file, no server). Every write is one short
transaction that takes SQLite's write lock up front (`BEGIN IMMEDIATE`), so a check-then-insert
(dedupe) or a claim is atomic across processes; WAL journaling with `synchronous=FULL` makes a
committed transaction survive `kill -9` of any process (`synchronous=NORMAL`, the default; `FULL`
also survives a power cut, at one fsync per transaction).

Jobs move `queued -> running -> done | failed`; `waiting` is a job parked until something releases
it (a fork PR waiting for `/atrex approve`, or a published evaluation whose changes to what judges
a kernel wait for it). A worker *claims* a job with a lease and renews it with
heartbeats; a job whose lease expired (its worker died) is claimable again. Every mutation by a
worker names the owner, so a worker that lost its lease cannot complete a job someone else now runs.

`JobStore` is the small interface the web process and the workers use; a distributed engine (Celery
on Redis) can sit beside it later, with this store staying the record of what happened. The side
tables (effects, approvals, installations, sticky comments) are the bot's memory of its GitHub
effects, so that re-running a job after a crash does not repeat them.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    bindparam,
    create_engine,
    event,
    func,
    inspect,
    select,
)
from sqlalchemy.engine import Connection, Engine

QUEUED, RUNNING, WAITING, DONE, FAILED = "queued", "running", "waiting", "done", "failed"
ACTIVE_STATES = (QUEUED, RUNNING, WAITING)
STATES = (QUEUED, RUNNING, WAITING, DONE, FAILED)

metadata = MetaData()

jobs = Table(
    "jobs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(64), nullable=False),
    Column("queue", String(64), nullable=False),
    Column("state", String(16), nullable=False, index=True),
    Column("payload", Text, nullable=False),
    Column("dedupe_key", String(512), index=True),
    Column("group_key", String(512), index=True),
    Column("attempts", Integer, nullable=False, default=0),
    Column("max_attempts", Integer, nullable=False),
    Column("not_before", Float, nullable=False, default=0.0),
    Column("lease_owner", String(255)),
    Column("lease_expires", Float),
    Column("result", Text),
    Column("error", Text),
    Column("delivery_id", String(128)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)
deliveries = Table(
    "deliveries", metadata,
    Column("delivery_id", String(128), primary_key=True),
    Column("event", String(64), nullable=False),
    Column("action", String(64)),
    Column("received_at", Float, nullable=False),
    Column("jobs", Text, nullable=False),  # JSON list of job ids it created or matched
)
effects = Table(
    "effects", metadata,
    Column("job_id", Integer, primary_key=True),
    Column("name", String(128), primary_key=True),
    Column("value", Text, nullable=False),
)
approvals = Table(
    "approvals", metadata,
    Column("repo", String(255), primary_key=True),
    Column("pr", Integer, primary_key=True),
    Column("sha", String(64), primary_key=True),
    Column("approved_by", String(255), nullable=False),
    Column("approved_at", Float, nullable=False),
)
# A maintainer's `/atrex approve <sha>` of a commit that changes what judges its kernels (looser
# tolerances, dropped shapes, ...; bot.judging). Kept apart from `approvals` (running a fork's
# code): approving a fork's commit to run is not accepting the grading rules it brings.
judging_approvals = Table(
    "judging_approvals", metadata,
    Column("repo", String(255), primary_key=True),
    Column("pr", Integer, primary_key=True),
    Column("sha", String(64), primary_key=True),
    Column("approved_by", String(255), nullable=False),
    Column("approved_at", Float, nullable=False),
)
installed = Table(
    "installed_repos", metadata,
    Column("installation_id", BigInteger, primary_key=True),
    Column("repo", String(255), primary_key=True),
    Column("account", String(255)),
)
stickies = Table(
    "sticky_comments", metadata,
    Column("repo", String(255), primary_key=True),
    Column("pr", Integer, primary_key=True),
    Column("comment_id", BigInteger, nullable=False),
)

# GitHub's ids outgrow 32 bits (comment ids passed 2**31 in 2022); SQLite's INTEGER is 64-bit
# anyway, a server database's is not.
_GITHUB_IDS = (("installed_repos", "installation_id"), ("sticky_comments", "comment_id"))


def _widen_github_ids(engine: Engine) -> None:
    """Tables made before these columns were BIGINT are widened in place (create_all leaves an
    existing table as it is); the rows stay."""
    if engine.dialect.name == "sqlite":
        return
    columns = {table: {c["name"]: c["type"] for c in inspect(engine).get_columns(table)}
               for table, _ in _GITHUB_IDS}
    with engine.begin() as conn:
        for table, column in _GITHUB_IDS:
            if not isinstance(columns[table][column], BigInteger):
                conn.exec_driver_sql(
                    f"ALTER TABLE {table} ALTER COLUMN {column} TYPE BIGINT")


# The intake's statements, built once: constructing SQLAlchemy statements per request costs more
# CPU than SQLite spends running them.
_SEEN_DELIVERY = select(deliveries.c.jobs).where(deliveries.c.delivery_id == bindparam("d"))
_SAME_KEY = select(jobs.c.id).where(jobs.c.dedupe_key == bindparam("k")).order_by(
    jobs.c.id.desc()).limit(1)
_SAME_KEY_ACTIVE = _SAME_KEY.where(jobs.c.state.in_(ACTIVE_STATES))
_INSERT_JOB = jobs.insert()
_INSERT_DELIVERY = deliveries.insert()


@dataclass
class NewJob:
    """A job to record.

    `dedupe="always"`: never a second job with this key (a PR event for a commit already seen);
    `dedupe="active"`: not while one is queued, running or waiting (a rerun)."""

    kind: str
    queue: str
    payload: dict[str, Any]
    dedupe_key: str | None = None
    dedupe: str = "always"
    group_key: str | None = None  # jobs of one group and queue never run at the same time
    state: str = QUEUED
    max_attempts: int | None = None


@dataclass(frozen=True)
class RepoChange:
    """A change to the installed repositories, recorded in the delivery's own transaction.

    `exact`: the installation's repositories are exactly `add` (installation.created);
    `remove_all`: the installation is gone (deleted, suspended)."""

    installation_id: int
    account: str | None = None
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    exact: bool = False
    remove_all: bool = False


@dataclass
class Job:
    id: int
    kind: str
    queue: str
    state: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    dedupe_key: str | None = None
    group_key: str | None = None
    lease_owner: str | None = None
    lease_expires: float | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    delivery_id: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    not_before: float = 0.0

    @property
    def exhausted(self) -> bool:
        """Claimed more often than allowed: earlier workers died on it; give up, do not run."""
        return self.attempts > self.max_attempts


@dataclass
class Accepted:
    duplicate_delivery: bool
    jobs: list[tuple[int, bool]] = field(default_factory=list)  # (job id, newly created)


class JobStore(Protocol):
    """What the web process and the workers need from a job engine."""

    def accept(self, delivery_id: str, event: str, action: str | None,
               new_jobs: list[NewJob], repo_changes: list[RepoChange] = ()) -> Accepted: ...
    def enqueue(self, job: NewJob, parent: tuple[int, str] | None = None) -> tuple[int, bool]: ...
    def claim(self, queues: list[str], owner: str, lease_s: float) -> Job | None: ...
    def claim_job(self, job_id: int, queues: list[str], owner: str,
                  lease_s: float) -> Job | None: ...
    def heartbeat(self, job_id: int, owner: str, lease_s: float) -> bool: ...
    def complete(self, job_id: int, owner: str, result: dict | None = None) -> bool: ...
    def fail(self, job_id: int, owner: str, error: str, retry_in: float | None = None) -> bool: ...
    def move(self, job_id: int, owner: str, queue: str, state: str = QUEUED,
             payload: dict | None = None) -> bool: ...
    def release(self, job_id: int, queue: str) -> bool: ...
    def get(self, job_id: int) -> Job | None: ...
    def list(self, state: str | None = None, kind: str | None = None) -> list[Job]: ...


class SqlStore:
    """`JobStore` and the bot's side tables on one SQLAlchemy engine (SQLite by default).

    Each process opens its own store after it starts: a process forked while a store is open
    inherits SQLite's per-process lock records and any mutex the checkpoint thread held at that
    moment (SQLite's "do not carry a connection across fork()")."""

    def __init__(self, url: str, synchronous: str = "NORMAL", default_max_attempts: int = 3,
                 clock: Callable[[], float] = time.time):
        self.url = url
        self.clock = clock
        self.default_max_attempts = default_max_attempts
        self.engine = _engine(url, synchronous)
        self._write_lock = threading.Lock()
        metadata.create_all(self.engine)
        _widen_github_ids(self.engine)
        self._stop = threading.Event()
        if _is_sqlite_file(url):
            threading.Thread(target=self._checkpoints, name="sqlite-checkpoint",
                             daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.engine.dispose()

    def _checkpoints(self, interval: float = 1.0) -> None:
        """Copy the WAL into the database in the background. SQLite would otherwise do it inside
        some request's COMMIT, with an fsync, while every other writer waits."""
        while not self._stop.wait(interval):
            try:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")
            except Exception:  # busy or closing: the next round catches up
                continue

    def warm(self, connections: int) -> None:
        """Open pooled connections now, so the first requests do not pay for it."""
        opened = [self.engine.connect() for _ in range(connections)]
        for conn in opened:
            conn.exec_driver_sql("SELECT 1")
            conn.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Connection]:
        """A write transaction (on SQLite it holds the write lock from its first statement).

        Threads of one process queue on a lock first: SQLite's own busy handler sleeps in
        growing steps (up to 100 ms) while it waits, which would show up as latency spikes."""
        with self._write_lock, self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        """A read-only snapshot; on SQLite with WAL it never waits for writers."""
        with self.engine.connect() as conn:
            yield conn.execution_options(atrex_read=True)

    # --- intake ------------------------------------------------------------------------------

    def accept(self, delivery_id: str, event: str, action: str | None,
               new_jobs: list[NewJob], repo_changes: list[RepoChange] = ()) -> Accepted:
        """Record a delivery, its jobs and its installed-repository changes in one transaction
        (a kill at any moment leaves all of it or none of it); a known delivery changes
        nothing."""
        with self._tx() as conn:
            seen = conn.execute(_SEEN_DELIVERY, {"d": delivery_id}).first()
            if seen is not None:
                return Accepted(True, [(job_id, False) for job_id in json.loads(seen.jobs)])
            results = [self._enqueue(conn, job, delivery_id) for job in new_jobs]
            for change in repo_changes:
                _apply_repo_change(conn, change)
            conn.execute(_INSERT_DELIVERY, {
                "delivery_id": delivery_id, "event": event, "action": action,
                "received_at": self.clock(), "jobs": json.dumps([i for i, _ in results])})
        return Accepted(False, results)

    def enqueue(self, job: NewJob, parent: tuple[int, str] | None = None) -> tuple[int, bool]:
        """Record a job. With `parent=(job id, name)` this is idempotent for that parent: a parent
        re-run after a crash gets the job it already spawned back instead of a second one."""
        with self._tx() as conn:
            if parent is not None:
                known = self._effect(conn, *parent)
                if known is not None:
                    return int(known), False
            job_id, created = self._enqueue(conn, job, None)
            if parent is not None:
                conn.execute(effects.insert().values(job_id=parent[0], name=parent[1],
                                                     value=str(job_id)))
        return job_id, created

    def _enqueue(self, conn: Connection, job: NewJob, delivery_id: str | None) -> tuple[int, bool]:
        if job.dedupe_key is not None:
            query = _SAME_KEY_ACTIVE if job.dedupe == "active" else _SAME_KEY
            existing = conn.execute(query, {"k": job.dedupe_key}).first()
            if existing is not None:
                return existing.id, False
        now = self.clock()
        row = conn.execute(_INSERT_JOB, {
            "kind": job.kind, "queue": job.queue, "state": job.state,
            "payload": json.dumps(job.payload), "dedupe_key": job.dedupe_key,
            "group_key": job.group_key, "attempts": 0,
            "max_attempts": job.max_attempts or self.default_max_attempts, "not_before": 0.0,
            "lease_owner": None, "lease_expires": None, "result": None, "error": None,
            "delivery_id": delivery_id, "created_at": now, "updated_at": now})
        return row.inserted_primary_key[0], True

    # --- workers -----------------------------------------------------------------------------

    def claim(self, queues: list[str], owner: str, lease_s: float) -> Job | None:
        """The oldest runnable job of these queues, leased to `owner` (or None)."""
        query = (select(jobs).where(self._claimable(queues, self.clock()))
                 .order_by(jobs.c.id).limit(1))
        return self._claim_first(query, owner, lease_s)

    def claim_job(self, job_id: int, queues: list[str], owner: str,
                  lease_s: float) -> Job | None:
        """This job, if it is runnable on these queues now (a job id from a distributed queue)."""
        query = select(jobs).where(jobs.c.id == job_id, self._claimable(queues, self.clock()))
        return self._claim_first(query, owner, lease_s)

    def dispatchable(self, limit: int = 200) -> list[Job]:
        """Jobs a worker could claim now, on any queue (what a dispatcher hands a broker)."""
        query = (select(jobs).where(self._claimable(None, self.clock()))
                 .order_by(jobs.c.id).limit(limit))
        with self._read() as conn:
            return [_job(row) for row in conn.execute(query)]

    def _claimable(self, queues: list[str] | None, now: float):
        """Queued and due, or running with an expired lease (its worker died); never while
        another job of its group runs on its queue."""
        other = jobs.alias("other")
        busy_group = select(other.c.id).where(
            other.c.group_key == jobs.c.group_key, other.c.queue == jobs.c.queue,
            other.c.state == RUNNING, other.c.lease_expires >= now, other.c.id != jobs.c.id)
        runnable = (jobs.c.state == QUEUED) | (
            (jobs.c.state == RUNNING) & (jobs.c.lease_expires < now))
        where = (jobs.c.not_before <= now) & runnable & (
            jobs.c.group_key.is_(None) | ~busy_group.exists())
        return where if queues is None else jobs.c.queue.in_(queues) & where

    def _claim_first(self, query, owner: str, lease_s: float) -> Job | None:
        now = self.clock()
        with self._tx() as conn:
            row = conn.execute(query).first()
            if row is None:
                return None
            conn.execute(jobs.update().where(jobs.c.id == row.id).values(
                state=RUNNING, lease_owner=owner, lease_expires=now + lease_s,
                attempts=row.attempts + 1, updated_at=now))
            return self._get(conn, row.id)

    def heartbeat(self, job_id: int, owner: str, lease_s: float) -> bool:
        """Renew the lease; False when the job is no longer this owner's."""
        now = self.clock()
        return self._owned_update(job_id, owner, lease_expires=now + lease_s, updated_at=now)

    def complete(self, job_id: int, owner: str, result: dict | None = None) -> bool:
        return self._owned_update(job_id, owner, state=DONE, result=_dump(result),
                                  lease_owner=None, lease_expires=None, error=None,
                                  updated_at=self.clock())

    def fail(self, job_id: int, owner: str, error: str, retry_in: float | None = None) -> bool:
        """Requeue after `retry_in` seconds while attempts remain; otherwise the job has failed."""
        now = self.clock()
        with self._tx() as conn:
            job = self._get(conn, job_id)
            if job is None or job.state != RUNNING or job.lease_owner != owner:
                return False
            retry = retry_in is not None and job.attempts < job.max_attempts
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(
                state=QUEUED if retry else FAILED, error=error[-4000:],
                not_before=now + (retry_in or 0.0), lease_owner=None, lease_expires=None,
                updated_at=now))
            return True

    def move(self, job_id: int, owner: str, queue: str, state: str = QUEUED,
             payload: dict | None = None) -> bool:
        """Hand a running job to another queue (next stage) or park it (`state=WAITING`)."""
        values: dict[str, Any] = dict(queue=queue, state=state, lease_owner=None,
                                      lease_expires=None, updated_at=self.clock())
        if state == QUEUED:
            values["attempts"] = 0  # a new stage gets its own tries
        if payload is not None:
            values["payload"] = json.dumps(payload)
        return self._owned_update(job_id, owner, **values)

    def release(self, job_id: int, queue: str) -> bool:
        """Make a parked job runnable on `queue`."""
        with self._tx() as conn:
            done = conn.execute(jobs.update().where(jobs.c.id == job_id, jobs.c.state == WAITING)
                                .values(state=QUEUED, queue=queue, attempts=0,
                                        updated_at=self.clock()))
            return done.rowcount == 1

    def _owned_update(self, job_id: int, owner: str, **values: Any) -> bool:
        """Update a job only while `owner` holds it (fences off a worker that lost its lease)."""
        with self._tx() as conn:
            done = conn.execute(jobs.update().where(
                jobs.c.id == job_id, jobs.c.state == RUNNING, jobs.c.lease_owner == owner)
                .values(**values))
            return done.rowcount == 1

    # --- reading -----------------------------------------------------------------------------

    def get(self, job_id: int) -> Job | None:
        with self._read() as conn:
            return self._get(conn, job_id)

    def _get(self, conn: Connection, job_id: int) -> Job | None:
        row = conn.execute(select(jobs).where(jobs.c.id == job_id)).first()
        return _job(row) if row is not None else None

    def list(self, state: str | None = None, kind: str | None = None) -> list[Job]:
        query = select(jobs).order_by(jobs.c.id)
        if state is not None:
            query = query.where(jobs.c.state == state)
        if kind is not None:
            query = query.where(jobs.c.kind == kind)
        with self._read() as conn:
            return [_job(row) for row in conn.execute(query)]

    def by_key(self, dedupe_key: str) -> Job | None:
        """The newest job recorded under a dedupe key."""
        with self._read() as conn:
            row = conn.execute(select(jobs).where(jobs.c.dedupe_key == dedupe_key)
                               .order_by(jobs.c.id.desc())).first()
            return _job(row) if row is not None else None

    def newer_in_group(self, job: Job, kind: str) -> Job | None:
        """A later active job of the same kind and group (a newer push to the same PR)."""
        with self._read() as conn:
            row = conn.execute(select(jobs).where(
                jobs.c.group_key == job.group_key, jobs.c.kind == kind, jobs.c.id > job.id,
                jobs.c.state.in_(ACTIVE_STATES)).order_by(jobs.c.id.desc())).first()
            return _job(row) if row is not None else None

    def active_in_group(self, group_key: str, kind: str) -> Job | None:
        """A queued, running or waiting job of this kind and group (the oldest), if any."""
        with self._read() as conn:
            row = conn.execute(select(jobs).where(
                jobs.c.group_key == group_key, jobs.c.kind == kind,
                jobs.c.state.in_(ACTIVE_STATES)).order_by(jobs.c.id)).first()
            return _job(row) if row is not None else None

    def counts(self) -> dict[str, int]:
        with self._read() as conn:
            rows = conn.execute(select(jobs.c.state, func.count()).group_by(jobs.c.state))
            found = {state: count for state, count in rows}
            found["deliveries"] = conn.execute(
                select(func.count()).select_from(deliveries)).scalar_one()
        return {state: found.get(state, 0) for state in (*STATES, "deliveries")}

    def ping(self) -> None:
        with self._read() as conn:
            conn.execute(select(1))

    # --- effects: what a job already did on GitHub -------------------------------------------

    def effect(self, job_id: int, name: str) -> str | None:
        with self._read() as conn:
            return self._effect(conn, job_id, name)

    def _effect(self, conn: Connection, job_id: int, name: str) -> str | None:
        row = conn.execute(select(effects.c.value).where(
            effects.c.job_id == job_id, effects.c.name == name)).first()
        return row.value if row is not None else None

    def swap_effect(self, job_id: int, name: str, expected: str | None, value: str) -> bool:
        """Compare-and-set: record `value` only if the effect is still `expected`."""
        with self._tx() as conn:
            if self._effect(conn, job_id, name) != expected:
                return False
            conn.execute(effects.delete().where(effects.c.job_id == job_id,
                                                effects.c.name == name))
            conn.execute(effects.insert().values(job_id=job_id, name=name, value=value))
            return True

    def clear_effect(self, job_id: int, name: str) -> None:
        with self._tx() as conn:
            conn.execute(effects.delete().where(effects.c.job_id == job_id,
                                                effects.c.name == name))

    def effects_of(self, job_id: int, prefix: str = "") -> dict[str, str]:
        with self._read() as conn:
            rows = conn.execute(select(effects.c.name, effects.c.value).where(
                effects.c.job_id == job_id, effects.c.name.startswith(prefix)))
            return {row.name: row.value for row in rows}

    def set_effect(self, job_id: int, name: str, value: str) -> None:
        with self._tx() as conn:
            conn.execute(effects.delete().where(effects.c.job_id == job_id,
                                                effects.c.name == name))
            conn.execute(effects.insert().values(job_id=job_id, name=name, value=value))

    # --- approvals, installations, sticky comments -------------------------------------------

    def approve(self, repo: str, pr: int, sha: str, by: str) -> None:
        with self._tx() as conn:
            if not self._approved(conn, repo, pr, sha):
                conn.execute(approvals.insert().values(repo=repo, pr=pr, sha=sha, approved_by=by,
                                                       approved_at=self.clock()))

    def is_approved(self, repo: str, pr: int, sha: str) -> bool:
        with self._read() as conn:
            return self._approved(conn, repo, pr, sha)

    def _approved(self, conn: Connection, repo: str, pr: int, sha: str) -> bool:
        return conn.execute(select(approvals.c.sha).where(
            approvals.c.repo == repo, approvals.c.pr == pr, approvals.c.sha == sha)).first() \
            is not None

    def approve_judging(self, repo: str, pr: int, sha: str, by: str) -> None:
        with self._tx() as conn:
            if self._judging_approver(conn, repo, pr, sha) is None:
                conn.execute(judging_approvals.insert().values(
                    repo=repo, pr=pr, sha=sha, approved_by=by, approved_at=self.clock()))

    def judging_approver(self, repo: str, pr: int, sha: str) -> str | None:
        """Who approved the changes to what judges the kernels in this commit, if anyone."""
        with self._read() as conn:
            return self._judging_approver(conn, repo, pr, sha)

    def _judging_approver(self, conn: Connection, repo: str, pr: int, sha: str) -> str | None:
        row = conn.execute(select(judging_approvals.c.approved_by).where(
            judging_approvals.c.repo == repo, judging_approvals.c.pr == pr,
            judging_approvals.c.sha == sha)).first()
        return row[0] if row is not None else None

    def add_repos(self, installation_id: int, account: str | None, repos: list[str]) -> None:
        with self._tx() as conn:
            _apply_repo_change(conn, RepoChange(installation_id, account, add=tuple(repos)))

    def remove_repos(self, installation_id: int, repos: list[str] | None = None) -> None:
        """Forget some repositories of an installation, or all of them (`repos=None`)."""
        change = RepoChange(installation_id, remove=tuple(repos or ()), remove_all=repos is None)
        with self._tx() as conn:
            _apply_repo_change(conn, change)

    def installed_repos(self) -> dict[str, int]:
        """Installed repository full name -> installation id."""
        with self._read() as conn:
            return {row.repo: row.installation_id for row in conn.execute(
                select(installed.c.repo, installed.c.installation_id).order_by(installed.c.repo))}

    def sticky(self, repo: str, pr: int) -> int | None:
        with self._read() as conn:
            row = conn.execute(select(stickies.c.comment_id).where(
                stickies.c.repo == repo, stickies.c.pr == pr)).first()
            return row.comment_id if row is not None else None

    def set_sticky(self, repo: str, pr: int, comment_id: int | None) -> None:
        with self._tx() as conn:
            conn.execute(stickies.delete().where(stickies.c.repo == repo, stickies.c.pr == pr))
            if comment_id is not None:
                conn.execute(stickies.insert().values(repo=repo, pr=pr, comment_id=comment_id))


_DELETE_INSTALLATION = installed.delete().where(
    installed.c.installation_id == bindparam("i"))
_DELETE_REPO = _DELETE_INSTALLATION.where(installed.c.repo == bindparam("r"))
_INSERT_REPO = installed.insert().values(installation_id=bindparam("i"), repo=bindparam("r"),
                                         account=bindparam("a"))


def _apply_repo_change(conn: Connection, change: RepoChange) -> None:
    """A handful of statements whatever the number of repositories: each is executed once with
    every repository's parameters (executemany). 50,000 repositories as a delete and an insert
    per repository took 18.6 s (20,000) inside the request; as batches, see docs/bot.md."""
    i = change.installation_id
    if change.exact or change.remove_all:
        conn.execute(_DELETE_INSTALLATION, {"i": i})
    gone = [{"i": i, "r": repo} for repo in (*change.remove, *(() if change.exact else
                                                                 change.add))]
    if gone and not change.remove_all:
        conn.execute(_DELETE_REPO, gone)
    new = [{"i": i, "r": repo, "a": change.account} for repo in dict.fromkeys(change.add)]
    if new and not change.remove_all:
        conn.execute(_INSERT_REPO, new)


def _engine(url: str, synchronous: str) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, isolation_level="SERIALIZABLE", pool_pre_ping=True)
    engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False},
                           pool_size=16, max_overflow=16)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # noqa: ANN001 - DB-API objects
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (below)
        cursor = dbapi_conn.cursor()
        if _is_sqlite_file(url):
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA wal_autocheckpoint=0")  # see SqlStore._checkpoints
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # noqa: ANN001
        read = conn.get_execution_options().get("atrex_read", False)
        conn.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")

    return engine


def _is_sqlite_file(url: str) -> bool:
    return url.startswith("sqlite") and ":memory:" not in url and url not in (
        "sqlite://", "sqlite:///")


def _dump(value: dict | None) -> str | None:
    return None if value is None else json.dumps(value)


def _job(row: Any) -> Job:
    return Job(id=row.id, kind=row.kind, queue=row.queue, state=row.state,
               payload=json.loads(row.payload), attempts=row.attempts,
               max_attempts=row.max_attempts, dedupe_key=row.dedupe_key,
               group_key=row.group_key, lease_owner=row.lease_owner,
               lease_expires=row.lease_expires,
               result=json.loads(row.result) if row.result else None, error=row.error,
               delivery_id=row.delivery_id, created_at=row.created_at, updated_at=row.updated_at,
               not_before=row.not_before)
