"""A pull request's evaluation in the history: record the head's report, then read the default
branch's recent comparable numbers for the comment's trend.

Called when the evaluation is published, before the comment is rendered. Recording is idempotent
per job (`job:<id>:head`), so a job re-run after a crash records nothing twice and renders the same
trend.
"""

from __future__ import annotations

import logging

from .config import BotConfig
from .history import BRANCH, PR, HistoryStore, Retention, environment_of
from .render import PrResult
from .store import SqlStore
from .trend import one_per_commit, op_trends

log = logging.getLogger(__name__)


def history_for(config: BotConfig, store: SqlStore) -> HistoryStore:
    return HistoryStore(store, Retention(branch_days=config.history_branch_days,
                                         pr_days=config.history_pr_days))


def record_pr(history: HistoryStore, repo: str, pr: int, job_id: int, result: PrResult) -> None:
    if result.head is None or result.error:
        return
    history.record(f"job:{job_id}:head", repo, result.head_sha, PR, result.head, pr=pr,
                   job_id=job_id, threshold=result.threshold)


def with_trend(history: HistoryStore, config: BotConfig, repo: str,
               result: PrResult) -> PrResult:
    """The result with the trend of its changed operators and the dashboard link."""
    result.dashboard_url = config.dashboard_url(repo)
    if result.head is None or result.error or config.trend_points <= 0:
        return result
    env, _ = environment_of(result.head.device)
    recent = history.evaluations(repo, kind=BRANCH, env_key=env.key,
                                 last=4 * config.trend_points)
    commits = one_per_commit(recent)
    result.trend = op_trends(commits, [(c.name, c.fraction_head) for c in result.judgement.ops],
                             config.trend_points)
    result.trend_env = env.label
    return result
