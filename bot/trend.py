"""Series over a repository's history: what the dashboard draws, `atrex history` prints and the PR
comment's trend shows. Pure functions of `atrex.bot.history.Evaluation`s; no I/O.

A series follows one number over the default branch's commits, one point per commit (its newest
comparable evaluation). A *move* is a change between two consecutive points larger than the
repository's regression threshold (relative), or a change of an operator's status; a move in the
bad direction (a lower fraction, share or score, more GPU-hours at stake, a status that stops
being `pass`) is a *regression*. The number's "moved by" is the commit (and the pull request that
merged it, when known) of its newest move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .history import BRANCH, Environment, Evaluation, OpPoint

SCHEMA = "atrex.history/1"
PASS = "pass"
SPARKS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Point:
    sha: str
    pr: int | None
    recorded_at: float
    value: float | None
    status: str | None = None  # an operator's status at this commit (None: the op was absent)


@dataclass(frozen=True)
class Move:
    metric: str
    op: str | None
    sha: str
    pr: int | None
    previous_sha: str
    before: float | None
    after: float | None
    status_before: str | None
    status_after: str | None
    regression: bool

    @property
    def change(self) -> float | None:
        """Relative change (None when a status changed or a value is missing or zero)."""
        if self.before is None or self.after is None or self.before == 0:
            return None
        return (self.after - self.before) / abs(self.before)

    def describe(self) -> str:
        if self.status_before != self.status_after and self.status_after != PASS:
            return f"{self.status_before or 'absent'} → {self.status_after or 'absent'}"
        if self.status_before != self.status_after:
            return f"{self.status_before or 'absent'} → pass"
        change = self.change
        if change is None:
            return f"{_num(self.before)} → {_num(self.after)}"
        return f"{_num(self.before)} → {_num(self.after)} ({change:+.1%})"

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "op": self.op, "sha": self.sha, "pr": self.pr,
                "previous_sha": self.previous_sha, "before": self.before, "after": self.after,
                "status_before": self.status_before, "status_after": self.status_after,
                "change": self.change, "regression": self.regression}


@dataclass(frozen=True)
class Series:
    metric: str  # score, gpu_hours_at_stake, fraction, own_kernel_share, op_score, op_stake
    op: str | None
    higher_is_better: bool
    points: tuple[Point, ...]
    moves: tuple[Move, ...]

    @property
    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None

    @property
    def moved_by(self) -> Move | None:
        return self.moves[-1] if self.moves else None

    @property
    def regressions(self) -> tuple[Move, ...]:
        return tuple(m for m in self.moves if m.regression)

    def values(self) -> list[float | None]:
        return [p.value for p in self.points]


OP_METRICS: dict[str, tuple[Callable[[OpPoint], float | None], bool]] = {
    "fraction": (lambda p: p.fraction, True),
    "own_kernel_share": (lambda p: p.own_kernel_share, True),
    "op_score": (lambda p: p.score, True),
    "op_stake": (lambda p: p.gpu_hours_at_stake, False),
}
OP_LABELS = {"fraction": "roofline fraction", "own_kernel_share": "own-kernel share",
             "op_score": "GPU-hour score (E_op)", "op_stake": "GPU-hours at stake"}


@dataclass(frozen=True)
class OpHistory:
    op: str
    latest: OpPoint | None  # at the newest commit (None: the op is gone)
    series: dict[str, Series]


@dataclass
class RepoHistory:
    repo: str
    env: Environment | None
    environments: list[tuple[str, int, float]]  # every class of the repository (key, n, newest)
    commits: list[Evaluation]  # default branch, one per commit, oldest first, comparable
    score: Series
    stake: Series
    ops: dict[str, OpHistory]
    pulls: list[Evaluation] = field(default_factory=list)  # PR heads, comparable, newest last

    @property
    def latest(self) -> Evaluation | None:
        return self.commits[-1] if self.commits else None

    @property
    def regressions(self) -> list[Move]:
        found = list(self.score.regressions) + list(self.stake.regressions)
        for history in self.ops.values():
            for series in history.series.values():
                # a status change moves every number of the op: listed once, as the fraction's
                found += [m for m in series.regressions if series.metric == "fraction"
                          or m.status_before == m.status_after]
        return sorted(found, key=lambda m: _position(self.commits, m.sha), reverse=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "repo": self.repo,
            "environment": _env_dict(self.env) if self.env else None,
            "environments": [{"key": key, "evaluations": n, "newest": newest}
                             for key, n, newest in self.environments],
            "commits": [_commit_dict(e) for e in self.commits],
            "latest": [_latest_dict(h) for h in self.ops.values() if h.latest is not None],
            "regressions": [m.to_dict() for m in self.regressions],
            "pull_requests": [_commit_dict(e) for e in self.pulls],
        }


def one_per_commit(evals: Sequence[Evaluation]) -> list[Evaluation]:
    """The newest evaluation of each commit, in the order the commits were first evaluated."""
    first: dict[str, int] = {}
    newest: dict[str, Evaluation] = {}
    for index, e in enumerate(evals):
        first.setdefault(e.sha, index)
        newest[e.sha] = e
    return [newest[sha] for sha in sorted(first, key=first.get)]


def build(repo: str, evals: Sequence[Evaluation], environments: list[tuple[str, int, float]],
          env_key: str | None = None, pulls: Sequence[Evaluation] = (),
          last: int | None = None) -> RepoHistory:
    """The history of one comparability class (`env_key`; default: the newest timed default-branch
    evaluation's, else the newest's) from a repository's evaluations, oldest first; the newest
    `last` commits."""
    branch = [e for e in evals if e.kind == BRANCH]
    if env_key is None and branch:  # the newest timed environment: CPU runs have no fractions
        env_key = next((e for e in reversed(branch) if e.timed), branch[-1]).env.key
    comparable = [e for e in branch if e.env.key == env_key]
    commits = one_per_commit(comparable)[-last:] if last else one_per_commit(comparable)
    env = commits[-1].env if commits else None
    names = sorted({p.op for e in commits for p in e.ops})
    latest = commits[-1] if commits else None
    ops = {name: OpHistory(name, latest.op(name) if latest else None, {
        metric: op_series(commits, name, metric) for metric in OP_METRICS}) for name in names}
    return RepoHistory(
        repo=repo, env=env, environments=environments, commits=commits,
        score=series(commits, "score", lambda e: e.score, True),
        stake=series(commits, "gpu_hours_at_stake", lambda e: e.gpu_hours_at_stake, False),
        ops=ops, pulls=[e for e in pulls if e.env.key == env_key])


def series(commits: Sequence[Evaluation], metric: str,
           value: Callable[[Evaluation], float | None], higher_is_better: bool) -> Series:
    points = tuple(Point(e.sha, e.pr, e.recorded_at, value(e)) for e in commits)
    return Series(metric, None, higher_is_better, points,
                  _moves(commits, points, metric, None, higher_is_better))


def op_series(commits: Sequence[Evaluation], op: str, metric: str) -> Series:
    read, higher_is_better = OP_METRICS[metric]
    points = []
    for e in commits:
        p = e.op(op)
        status = p.status if p is not None else None
        points.append(Point(e.sha, e.pr, e.recorded_at,
                            read(p) if p is not None and p.status == PASS else None, status))
    points_t = tuple(points)
    return Series(metric, op, higher_is_better, points_t,
                  _moves(commits, points_t, metric, op, higher_is_better))


def _moves(commits: Sequence[Evaluation], points: tuple[Point, ...], metric: str,
           op: str | None, higher_is_better: bool) -> tuple[Move, ...]:
    moves = []
    for e, before, after in zip(commits[1:], points, points[1:], strict=False):
        status_changed = op is not None and before.status != after.status
        if status_changed and before.status is None:
            continue  # an operator appearing is not a move of its numbers
        significant, regression = _judge(before, after, e.threshold, higher_is_better)
        if status_changed:
            significant, regression = True, after.status != PASS
        if significant:
            moves.append(Move(metric, op, after.sha, after.pr, before.sha, before.value,
                              after.value, before.status, after.status, regression))
    return tuple(moves)


def _judge(before: Point, after: Point, threshold: float,
           higher_is_better: bool) -> tuple[bool, bool]:
    if before.value is None or after.value is None:
        return False, False
    delta = after.value - before.value
    scale = abs(before.value)
    if scale == 0:
        significant = delta != 0
    else:
        significant = abs(delta) / scale > threshold
    worse = delta < 0 if higher_is_better else delta > 0
    return significant, significant and worse


def _position(commits: Sequence[Evaluation], sha: str) -> int:
    return next((i for i, e in enumerate(commits) if e.sha == sha), -1)


# --- the PR comment's trend ---------------------------------------------------------------


@dataclass(frozen=True)
class OpTrend:
    op: str
    branch: tuple[float | None, ...]  # the default branch's last N comparable points, oldest first
    head: float | None

    @property
    def last(self) -> float | None:
        return next((v for v in reversed(self.branch) if v is not None), None)

    @property
    def change(self) -> float | None:
        last = self.last
        if last is None or self.head is None or last == 0:
            return None
        return (self.head - last) / last


def op_trends(commits: Sequence[Evaluation], ops: Sequence[tuple[str, float | None]],
              points: int) -> list[OpTrend]:
    """Per (operator, head fraction): the default branch's last `points` fractions (comparable
    commits, oldest first); a point is None where the op did not pass or did not exist."""
    recent = one_per_commit(commits)[-points:] if points > 0 else []
    trends = []
    for op, head in ops:
        values = []
        for e in recent:
            p = e.op(op)
            values.append(p.fraction if p is not None and p.status == PASS else None)
        trends.append(OpTrend(op, tuple(values), head))
    return trends


def sparkline(values: Sequence[float | None], low: float | None = None,
              high: float | None = None) -> str:
    """One block character per value (· for a missing one), scaled to [low, high]."""
    known = [v for v in values if v is not None]
    if not known:
        return "·" * len(values)
    low = min(known) if low is None else low
    high = max(known) if high is None else high
    span = high - low
    out = []
    for v in values:
        if v is None:
            out.append("·")
        elif span <= 0:
            out.append(SPARKS[len(SPARKS) // 2])
        else:
            out.append(SPARKS[round((v - low) / span * (len(SPARKS) - 1))])
    return "".join(out)


# --- JSON shapes ----------------------------------------------------------------------------


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _env_dict(env: Environment) -> dict[str, Any]:
    return {"key": env.key, "label": env.label, "device_kind": env.device_kind, "gpu": env.gpu,
            "gpu_name": env.gpu_name, "peaks_source": env.peaks_source}


def _op_dict(p: OpPoint) -> dict[str, Any]:
    return {"status": p.status, "fraction": p.fraction, "own_kernel_share": p.own_kernel_share,
            "score": p.score, "gpu_hours_at_stake": p.gpu_hours_at_stake,
            "importance": p.importance}


def _commit_dict(e: Evaluation) -> dict[str, Any]:
    return {"sha": e.sha, "kind": e.kind, "ref": e.ref, "pr": e.pr, "job_id": e.job_id,
            "recorded_at": e.recorded_at, "environment": e.env.key, "versions": e.versions,
            "timed": e.timed, "status": e.status, "score": e.score,
            "gpu_hours_at_stake": e.gpu_hours_at_stake, "gpu_hours_unit": e.gpu_hours_unit,
            "threshold": e.threshold, "ops": {p.op: _op_dict(p) for p in e.ops}}


def _latest_dict(h: OpHistory) -> dict[str, Any]:
    moved = {metric: (s.moved_by.to_dict() if s.moved_by else None)
             for metric, s in h.series.items()}
    return {"op": h.op, **_op_dict(h.latest), "moved_by": moved}
