"""The dashboard page's content, from a `RepoHistory`: charts, the latest table, regressions and
recent pull requests, with links to the commits and pull requests on GitHub. Pure functions."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from markupsafe import Markup

from ..trend import OP_LABELS, Move, RepoHistory, Series
from .charts import Line, line_chart

BLUE, GREY, GREEN, ORANGE = "#0969da", "#6e7781", "#1a7f37", "#bc4c00"


@dataclass(frozen=True)
class Links:
    web_url: str  # GitHub's web root
    repo: str

    def commit(self, sha: str) -> str:
        return f"{self.web_url}/{self.repo}/commit/{sha}"

    def pull(self, number: int) -> str:
        return f"{self.web_url}/{self.repo}/pull/{number}"


@dataclass(frozen=True)
class Cell:
    text: str
    move: Move | None = None


@dataclass(frozen=True)
class Row:
    op: str
    status: str
    cells: dict[str, Cell]


@dataclass(frozen=True)
class OpChart:
    op: str
    svg: Markup


def fraction(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def hours(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def when(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _regressed(series: Series) -> frozenset[int]:
    shas = {m.sha for m in series.regressions}
    return frozenset(i for i, p in enumerate(series.points) if p.sha in shas)


def repo_charts(h: RepoHistory) -> list[Markup]:
    shas = [e.sha for e in h.commits]
    score = line_chart("chart-score", "Repository score (importance-weighted GPU-hour "
                       "efficiency)", shas, [Line("score", "repository score", BLUE,
                                                   h.score.values(), _regressed(h.score))],
                       y_max=1.0)
    stake = line_chart("chart-stake", "GPU-hours at stake", shas,
                       [Line("gpu_hours_at_stake", "GPU-hours at stake", ORANGE,
                             h.stake.values(), _regressed(h.stake))], fmt=hours)
    return [score, stake]


def op_charts(h: RepoHistory) -> list[OpChart]:
    shas = [e.sha for e in h.commits]
    charts = []
    for name, op in h.ops.items():
        fraction_s, share_s = op.series["fraction"], op.series["own_kernel_share"]
        charts.append(OpChart(name, line_chart(
            f"chart-op-{name}", f"{name}: roofline fraction and own-kernel share", shas,
            [Line("fraction", "roofline fraction", BLUE, fraction_s.values(),
                  _regressed(fraction_s)),
             Line("own_kernel_share", "own-kernel share", GREEN, share_s.values(),
                  _regressed(share_s), dashed=True)], y_max=1.0)))
    return charts


def latest_rows(h: RepoHistory) -> list[Row]:
    rows = []
    for name, op in h.ops.items():
        p = op.latest
        if p is None:
            continue
        s = op.series
        rows.append(Row(name, p.status, {
            "fraction": Cell(fraction(p.fraction), s["fraction"].moved_by),
            "own_kernel_share": Cell(share(p.own_kernel_share), s["own_kernel_share"].moved_by),
            "op_score": Cell(fraction(p.score), s["op_score"].moved_by),
            "op_stake": Cell(hours(p.gpu_hours_at_stake), s["op_stake"].moved_by),
        }))
    return rows


COLUMNS = [(key, OP_LABELS[key]) for key in ("fraction", "own_kernel_share", "op_score",
                                             "op_stake")]
