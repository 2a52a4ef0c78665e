"""The PR comment's trend: the head's roofline fraction against the default branch's last N
comparable evaluations, recorded and read through the history store, and the dashboard link."""

from __future__ import annotations

import pytest
from atrex.bot.config import load_config
from atrex.bot.history import BRANCH, PR
from atrex.bot.prhistory import history_for, record_pr, with_trend
from atrex.bot.render import PrResult, comment_body
from atrex.bot.store import SqlStore
from atrex.bot.verdict import judge

from . import history_data as data

REPO = "octo/kernels"


@pytest.fixture
def store(tmp_path):
    store = SqlStore(f"sqlite:///{tmp_path / 'bot.db'}")
    yield store
    store.close()


def config(**env):
    return load_config(env={"ATREX_PUBLIC_URL": "https://atrex.example.com",
                            "ATREX_TREND_POINTS": "4", **env})


def pr_result(head, base=None):
    return PrResult("e" * 40, "b" * 40, judge(head, base, 0.05), head=head, base=base,
                    job_id=9, threshold=0.05)


def seed(history):
    for n, value in enumerate([0.30, 0.40, 0.41, 0.42, 0.44], start=1):
        history.record(f"b{n}", REPO, f"{n:040x}", BRANCH,
                       data.fractions({"rmsnorm": value, "softmax": 0.5}), at=1000.0 + n)
    history.record("m", REPO, "f" * 40, BRANCH, data.fractions(
        {"rmsnorm": 0.9}, device=data.h200(data.H200_MEASURED)), at=2000.0)


def test_the_comment_shows_the_heads_fraction_after_the_default_branch(store):
    cfg = config()
    history = history_for(cfg, store)
    seed(history)
    result = pr_result(data.fractions({"rmsnorm": 0.50, "newop": 0.2}),
                       data.fractions({"rmsnorm": 0.44}))
    record_pr(history, REPO, 12, 9, result)
    record_pr(history, REPO, 12, 9, result)  # a re-run after a crash records nothing again
    assert [e.pr for e in history.evaluations(REPO, kind=PR)] == [12]
    body = comment_body(with_trend(history, cfg, REPO, result))
    assert "**Trend** (roofline fraction: the default branch's last 4 comparable evaluations, " \
           "NVIDIA H200 (h200_sxm), datasheet peaks" in body
    row = next(line for line in body.splitlines() if line.startswith("| `rmsnorm` | `"))
    # 0.40 0.41 0.42 0.44 then the head's 0.50; the measured-peaks 0.9 is not comparable
    assert row == "| `rmsnorm` | `▁▂▂▄` → `█` | 0.400–0.440 | 0.440 | 0.500 | +13.6% |"
    new = next(line for line in body.splitlines() if line.startswith("| `newop` | `"))
    assert "`····` → `▅`" in new and "| — |" in new
    assert "📈 [History of every operator on the dashboard]" \
           "(https://atrex.example.com/dashboard/octo/kernels)" in body
    assert body.index("**Trend**") > body.index("```mermaid")


def test_no_comparable_history_no_gpu_or_no_points(store):
    history = history_for(config(), store)
    first = comment_body(with_trend(history, config(), REPO, pr_result(
        data.fractions({"rmsnorm": 0.5}))))
    assert "**Trend**: no comparable default-branch evaluation yet" in first
    seed(history)
    cpu = comment_body(with_trend(history, config(), REPO, pr_result(
        data.fractions({"rmsnorm": None}, device=data.cpu()))))
    assert "**Trend**" not in cpu and "/dashboard/octo/kernels" in cpu
    off = comment_body(with_trend(history, config(ATREX_TREND_POINTS="0"), REPO, pr_result(
        data.fractions({"rmsnorm": 0.5}))))
    assert "**Trend**" not in off
    unlinked = comment_body(with_trend(history, load_config(env={}), REPO, pr_result(
        data.fractions({"rmsnorm": 0.5}))))
    assert "**Trend**" in unlinked and "/dashboard/" not in unlinked
