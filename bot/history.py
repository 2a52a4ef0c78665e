"""The history of results: every completed evaluation's report, per commit, in the bot's database.

One row per evaluation (`evaluations`): the repository, the commit, what was evaluated (`branch`:
the default branch at that commit, every operator; `pr`: a pull request's head, its changed
operators), the environment it ran on (device, GPU kind, the peaks the roofline fractions are
relative to, driver/CUDA/torch/Triton/Python/atrex versions), the repository numbers and the whole
runner report (JSON). One row per operator of it (`op_points`) holds the numbers the series read:
status, call-weighted roofline fraction, own-kernel share, GPU-hour score E_op, GPU-hours at stake.

Only comparable runs are compared: two evaluations are comparable when they ran on the same device
kind and GPU kind against the same peaks (source and values); `Environment.key` says which, and
every query of a series takes one.

The tables live beside the job store's, on its engine, and are written through its transactions
(`SqlStore._tx`: on SQLite the write lock is taken up front, WAL with `synchronous=NORMAL`), so a
recorded evaluation survives `kill -9` of any process, and an evaluation and its operators are one
transaction: a crash leaves all of it or none. Recording is idempotent per `source` (e.g.
`job:12:head`): a job re-run after a crash records nothing twice. Retention is applied when a
repository records: PR-head evaluations older than `Retention.pr_days` and default-branch
evaluations older than `Retention.branch_days` (0: kept forever) are deleted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from atrex.runner.model import DeviceInfo, Report
from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    delete,
    func,
    select,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError

from .store import SqlStore
from .verdict import weighted_fraction

BRANCH, PR = "branch", "pr"
KINDS = (BRANCH, PR)
DAY_S = 86400.0

history_metadata = MetaData()

evaluations = Table(
    "history_evaluations", history_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("source", String(128), nullable=False),  # what recorded it, e.g. job:12:head
    Column("repo", String(255), nullable=False, index=True),
    Column("sha", String(64), nullable=False),
    Column("kind", String(16), nullable=False),  # branch | pr
    Column("ref", String(255)),  # the branch name (the default branch, or the PR's head branch)
    Column("pr", Integer),  # the PR evaluated, or for a branch commit the PR that merged it
    Column("job_id", Integer),
    Column("recorded_at", Float, nullable=False, index=True),
    Column("env_key", String(255), nullable=False),
    Column("device_kind", String(16), nullable=False),
    Column("gpu", String(128), nullable=False),
    Column("gpu_name", String(255), nullable=False),
    Column("peaks_source", String(32)),
    Column("peaks", Text),  # JSON of runner.model.Peaks
    Column("versions", Text, nullable=False),  # JSON: driver, cuda, torch, triton, python, atrex
    Column("timed", Boolean, nullable=False),
    Column("status", String(32), nullable=False),
    Column("score", Float),
    Column("gpu_hours_at_stake", Float),
    Column("gpu_hours_unit", String(64)),
    Column("threshold", Float, nullable=False),  # the repository's regression threshold then
    Column("report", Text, nullable=False),  # the runner's JSON report
    UniqueConstraint("source", name="uq_history_source"),
)
op_points = Table(
    "history_op_points", history_metadata,
    Column("evaluation_id", Integer, primary_key=True),
    Column("op", String(255), primary_key=True),
    Column("repo", String(255), nullable=False, index=True),
    Column("status", String(32), nullable=False),
    Column("fraction", Float),  # call-weighted roofline fraction over the timed shapes
    Column("own_kernel_share", Float),
    Column("score", Float),  # GPU-hour efficiency E_op
    Column("gpu_hours_at_stake", Float),
    Column("importance", Float),
)


@dataclass(frozen=True)
class Environment:
    """What an evaluation ran on; runs with the same `key` are comparable."""

    device_kind: str  # cpu | cuda
    gpu: str  # the GPU kind (peak-table key, e.g. h200_sxm), else the device's name
    gpu_name: str
    peaks_source: str | None  # datasheet | measured; None without peaks (CPU)
    peaks_digest: str | None  # a digest of the peak values

    @property
    def key(self) -> str:
        if self.peaks_source is None:
            return f"{self.device_kind}/{self.gpu}"
        return f"{self.device_kind}/{self.gpu}/{self.peaks_source}-{self.peaks_digest}"

    @property
    def label(self) -> str:
        if self.device_kind != "cuda":
            return f"CPU only ({self.gpu_name}): not timed"
        kind = f" ({self.gpu})" if self.gpu != self.gpu_name else ""
        return f"{self.gpu_name}{kind}, {self.peaks_source or 'no'} peaks"


def environment_of(device: DeviceInfo) -> tuple[Environment, str | None]:
    """The device's comparability class, and its peaks as JSON."""
    peaks = device.peaks
    if device.kind != "cuda" or peaks is None:  # untimed: every such run is comparable
        return Environment(device.kind, device.kind, device.name, None, None), None
    plain = {"source": peaks.source, "bandwidth_tbps": peaks.bandwidth_tbps,
             "tflops": dict(sorted(peaks.tflops.items()))}
    text = json.dumps(plain, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return Environment(device.kind, device.gpu_key or device.name, device.name, peaks.source,
                       digest), text


@dataclass(frozen=True)
class OpPoint:
    op: str
    status: str
    fraction: float | None
    own_kernel_share: float | None
    score: float | None
    gpu_hours_at_stake: float | None
    importance: float | None


@dataclass(frozen=True)
class Evaluation:
    id: int
    repo: str
    sha: str
    kind: str
    ref: str | None
    pr: int | None
    job_id: int | None
    recorded_at: float
    env: Environment
    versions: dict[str, str | None]
    timed: bool
    status: str
    score: float | None
    gpu_hours_at_stake: float | None
    gpu_hours_unit: str | None
    threshold: float
    ops: tuple[OpPoint, ...] = field(default=())

    def op(self, name: str) -> OpPoint | None:
        return next((p for p in self.ops if p.op == name), None)


@dataclass(frozen=True)
class Retention:
    """How long evaluations are kept, in days; 0 keeps them forever."""

    branch_days: float = 0.0
    pr_days: float = 90.0


def create_tables(tables: MetaData, store: SqlStore) -> None:
    """Create missing tables; another process (a second web worker) may be creating the same
    ones at this moment, which makes one CREATE TABLE fail: look again then."""
    try:
        tables.create_all(store.engine)
    except DBAPIError:
        tables.create_all(store.engine)


class HistoryError(ValueError):
    """A request the history cannot serve (an unknown kind, a malformed report)."""


class HistoryStore:
    """Evaluations and their operators, on the job store's engine and transactions."""

    def __init__(self, store: SqlStore, retention: Retention | None = None):
        self.store = store
        self.retention = retention or Retention()
        create_tables(history_metadata, store)

    # --- writing ---------------------------------------------------------------------------

    def record(self, source: str, repo: str, sha: str, kind: str, report: Report,
               ref: str | None = None, pr: int | None = None, job_id: int | None = None,
               threshold: float = 0.05, at: float | None = None) -> int:
        """Record one evaluation and its operators in one transaction; a `source` recorded
        before returns its id and changes nothing. Applies the retention of `repo`."""
        if kind not in KINDS:
            raise HistoryError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        now = self.store.clock() if at is None else at
        row = _evaluation_row(source, repo, sha, kind, report, ref, pr, job_id, threshold, now)
        try:
            with self.store._tx() as conn:
                known = _by_source(conn, source)
                if known is not None:
                    return known
                new_id = conn.execute(evaluations.insert().values(**row)).inserted_primary_key[0]
                points = [_op_row(new_id, repo, op) for op in report.ops]
                if points:
                    conn.execute(op_points.insert(), points)
                self._prune(conn, repo, self.store.clock())
                return new_id
        except IntegrityError:  # another process recorded the same source first
            with self.store._read() as conn:
                known = _by_source(conn, source)
            if known is None:
                raise
            return known

    def _prune(self, conn: Connection, repo: str, now: float) -> int:
        doomed = []
        for kind, days in ((PR, self.retention.pr_days), (BRANCH, self.retention.branch_days)):
            if days > 0:
                doomed += [r.id for r in conn.execute(select(evaluations.c.id).where(
                    evaluations.c.repo == repo, evaluations.c.kind == kind,
                    evaluations.c.recorded_at < now - days * DAY_S))]
        for chunk in _chunks(doomed, 500):
            conn.execute(delete(op_points).where(op_points.c.evaluation_id.in_(chunk)))
            conn.execute(delete(evaluations).where(evaluations.c.id.in_(chunk)))
        return len(doomed)

    def prune(self, repo: str | None = None) -> int:
        """Apply the retention now (to one repository or all); returns evaluations deleted."""
        repos = [repo] if repo is not None else self.repos()
        deleted = 0
        with self.store._tx() as conn:
            for name in repos:
                deleted += self._prune(conn, name, self.store.clock())
        return deleted

    # --- reading ---------------------------------------------------------------------------

    def recorded(self, source: str) -> int | None:
        """The id of the evaluation `source` recorded, if it did."""
        with self.store._read() as conn:
            return _by_source(conn, source)

    def repos(self) -> list[str]:
        with self.store._read() as conn:
            return [r.repo for r in conn.execute(
                select(evaluations.c.repo).distinct().order_by(evaluations.c.repo))]

    def evaluations(self, repo: str, kind: str | None = None, env_key: str | None = None,
                    last: int | None = None, pr: int | None = None) -> list[Evaluation]:
        """Evaluations of `repo`, oldest first (the newest `last` of them when given)."""
        where = [evaluations.c.repo == repo]
        if kind is not None:
            where.append(evaluations.c.kind == kind)
        if env_key is not None:
            where.append(evaluations.c.env_key == env_key)
        if pr is not None:
            where.append(evaluations.c.pr == pr)
        query = select(*_SUMMARY).where(*where).order_by(
            evaluations.c.recorded_at.desc(), evaluations.c.id.desc())
        if last is not None:
            query = query.limit(last)
        with self.store._read() as conn:
            rows = list(conn.execute(query))
            ops = _ops_of(conn, [r.id for r in rows])
        return [_evaluation(r, ops.get(r.id, ())) for r in reversed(rows)]

    def get(self, evaluation_id: int) -> Evaluation | None:
        with self.store._read() as conn:
            row = conn.execute(select(*_SUMMARY).where(
                evaluations.c.id == evaluation_id)).first()
            if row is None:
                return None
            return _evaluation(row, _ops_of(conn, [row.id]).get(row.id, ()))

    def report(self, evaluation_id: int) -> Report | None:
        """The whole runner report of an evaluation."""
        with self.store._read() as conn:
            text = conn.execute(select(evaluations.c.report).where(
                evaluations.c.id == evaluation_id)).scalar()
        return None if text is None else Report.from_json(text)

    def environments(self, repo: str, kind: str = BRANCH) -> list[tuple[str, int, float]]:
        """(environment key, evaluations, newest recorded_at) of `repo`, newest first."""
        query = (select(evaluations.c.env_key, func.count(), func.max(evaluations.c.recorded_at))
                 .where(evaluations.c.repo == repo, evaluations.c.kind == kind)
                 .group_by(evaluations.c.env_key))
        with self.store._read() as conn:
            found = [(key, count, newest) for key, count, newest in conn.execute(query)]
        return sorted(found, key=lambda item: -item[2])


_SUMMARY = [c for c in evaluations.c if c.name != "report"]


def _by_source(conn: Connection, source: str) -> int | None:
    return conn.execute(select(evaluations.c.id).where(evaluations.c.source == source)).scalar()


def _chunks(items: list[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _evaluation_row(source: str, repo: str, sha: str, kind: str, report: Report,
                    ref: str | None, pr: int | None, job_id: int | None, threshold: float,
                    now: float) -> dict[str, Any]:
    env, peaks = environment_of(report.device)
    d = report.device
    versions = {"driver": d.driver, "cuda": d.cuda, "torch": d.torch, "triton": d.triton,
                "python": d.python, "atrex": report.tool_version,
                "report_schema": report.schema_version}
    return {"source": source, "repo": repo, "sha": sha, "kind": kind, "ref": ref, "pr": pr,
            "job_id": job_id, "recorded_at": now, "env_key": env.key,
            "device_kind": env.device_kind, "gpu": env.gpu, "gpu_name": env.gpu_name,
            "peaks_source": env.peaks_source, "peaks": peaks, "versions": json.dumps(versions),
            "timed": bool(report.timing_available), "status": report.status.value,
            "score": report.score, "gpu_hours_at_stake": report.gpu_hours_at_stake,
            "gpu_hours_unit": report.gpu_hours_unit, "threshold": threshold,
            "report": report.to_json(indent=None)}


def _op_row(evaluation_id: int, repo: str, op) -> dict[str, Any]:
    return {"evaluation_id": evaluation_id, "op": op.name, "repo": repo,
            "status": op.status.value, "fraction": weighted_fraction(op),
            "own_kernel_share": op.own_kernel_share, "score": op.score,
            "gpu_hours_at_stake": op.gpu_hours_at_stake, "importance": op.importance}


def _ops_of(conn: Connection, ids: list[int]) -> dict[int, tuple[OpPoint, ...]]:
    found: dict[int, list[OpPoint]] = {}
    for chunk in _chunks(ids, 500):
        rows = conn.execute(select(op_points).where(op_points.c.evaluation_id.in_(chunk))
                            .order_by(op_points.c.evaluation_id, op_points.c.op))
        for r in rows:
            found.setdefault(r.evaluation_id, []).append(OpPoint(
                r.op, r.status, r.fraction, r.own_kernel_share, r.score, r.gpu_hours_at_stake,
                r.importance))
    return {key: tuple(points) for key, points in found.items()}


def _evaluation(row: Any, ops: tuple[OpPoint, ...]) -> Evaluation:
    digest = row.env_key.rsplit("-", 1)[-1] if row.peaks_source else None
    env = Environment(row.device_kind, row.gpu, row.gpu_name, row.peaks_source, digest)
    return Evaluation(
        id=row.id, repo=row.repo, sha=row.sha, kind=row.kind, ref=row.ref, pr=row.pr,
        job_id=row.job_id, recorded_at=row.recorded_at, env=env,
        versions=json.loads(row.versions), timed=bool(row.timed), status=row.status,
        score=row.score, gpu_hours_at_stake=row.gpu_hours_at_stake,
        gpu_hours_unit=row.gpu_hours_unit, threshold=row.threshold, ops=ops)
