"""The history store and its series, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from atrex.bot.history import BRANCH, PR, HistoryError, HistoryStore, Retention
from atrex.bot.store import NewJob, SqlStore
from atrex.bot.trend import build, one_per_commit, op_trends, sparkline
from atrex.runner.model import Status

from . import history_data as data
from .pg import postgres_server  # noqa: F401  (fixture)
from .world import ROOT

REPO = "octo/kernels"


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'bot.db'}"
    return request.getfixturevalue("postgres_server").new_database()


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def history(db_url, clock):
    store = SqlStore(db_url, clock=clock)
    yield HistoryStore(store, Retention(branch_days=0, pr_days=30))
    store.close()


def sha(n: int) -> str:
    return f"{n:040x}"


def record_branch(history, clock, n, values, **kwargs):
    clock.now += 3600
    return history.record(f"test:{n}:{clock.now}", REPO, sha(n), BRANCH,
                          data.fractions(values, **kwargs), ref="main", pr=100 + n)


def test_an_evaluation_is_kept_with_its_environment_versions_and_report(history, clock):
    rep = data.fractions({"rmsnorm": 0.5, "softmax": 0.25})
    first = history.record("job:7:head", REPO, sha(1), PR, rep, ref="tune", pr=12, job_id=7,
                           threshold=0.03)
    again = history.record("job:7:head", REPO, sha(1), PR, rep, ref="tune", pr=12, job_id=7)
    assert first == again and len(history.evaluations(REPO)) == 1  # idempotent per source
    [e] = history.evaluations(REPO, kind=PR)
    assert (e.sha, e.kind, e.ref, e.pr, e.job_id, e.threshold) == (sha(1), PR, "tune", 12, 7, 0.03)
    assert e.env.key.startswith("cuda/h200_sxm/datasheet-") and e.env.gpu_name == "NVIDIA H200"
    assert e.versions["driver"] == "580.159.04" and e.versions["torch"] == "2.11.0+cu130"
    assert e.versions["atrex"] == "0.1.0" and e.timed and e.status == "pass"
    assert e.op("rmsnorm").fraction == pytest.approx(0.5)
    assert e.op("softmax").own_kernel_share == 1.0 and e.op("missing") is None
    assert e.score == pytest.approx(rep.score)
    assert history.report(e.id).to_dict() == rep.to_dict()  # the whole report, as the runner
    assert history.get(e.id) == e and history.repos() == [REPO]
    with pytest.raises(HistoryError, match="kind must be one of"):
        history.record("x", REPO, sha(2), "tag", rep)


def test_only_comparable_runs_are_compared(history, clock):
    record_branch(history, clock, 1, {"rmsnorm": 0.50})
    record_branch(history, clock, 2, {"rmsnorm": 0.52})
    record_branch(history, clock, 3, {"rmsnorm": 0.70}, device=data.h200(data.H200_MEASURED))
    record_branch(history, clock, 4, {"rmsnorm": None}, device=data.cpu())
    record_branch(history, clock, 5, {"rmsnorm": 0.20})
    envs = history.environments(REPO)
    assert len(envs) == 3 and envs[0][1] == 3  # datasheet H200 is the newest class, 3 commits
    evals = history.evaluations(REPO)
    h = build(REPO, evals, envs)
    assert [e.sha for e in h.commits] == [sha(1), sha(2), sha(5)]
    assert h.ops["rmsnorm"].series["fraction"].values() == pytest.approx([0.50, 0.52, 0.20])
    [drop] = h.ops["rmsnorm"].series["fraction"].regressions
    assert (drop.sha, drop.previous_sha, drop.pr) == (sha(5), sha(2), 105)  # not vs measured 0.7
    measured = build(REPO, evals, envs, env_key=envs[1][0] if "measured" in envs[1][0]
                     else envs[2][0])
    assert [e.sha for e in measured.commits] == [sha(3)]
    assert history.evaluations(REPO, env_key=envs[0][0], last=2)[0].sha == sha(2)


def test_moves_regressions_and_what_moved_each_number(history, clock):
    record_branch(history, clock, 1, {"rmsnorm": 0.50, "softmax": 0.30})
    record_branch(history, clock, 2, {"rmsnorm": 0.51, "softmax": 0.40})  # +2% is noise
    record_branch(history, clock, 3, {"rmsnorm": 0.60, "softmax": 0.40},
                  share={"softmax": 0.5})
    record_branch(history, clock, 4, {"rmsnorm": 0.60, "softmax": 0.40},
                  status={"softmax": Status.FALLBACK})
    record_branch(history, clock, 5, {"rmsnorm": 0.61, "softmax": 0.41, "silu": 0.9})
    h = build(REPO, history.evaluations(REPO), history.environments(REPO))
    rms = h.ops["rmsnorm"].series["fraction"]
    assert [m.sha for m in rms.moves] == [sha(3)] and not rms.regressions
    assert rms.moved_by.pr == 103 and rms.moved_by.change == pytest.approx(0.6 / 0.51 - 1)
    soft = h.ops["softmax"].series["fraction"]
    assert [(m.sha, m.regression) for m in soft.moves] == [
        (sha(2), False), (sha(4), True), (sha(5), False)]
    assert soft.moves[1].describe() == "pass → fallback"
    assert soft.values() == pytest.approx([0.30, 0.40, 0.40, None, 0.41])
    share = h.ops["softmax"].series["own_kernel_share"]
    assert [(m.sha, m.regression) for m in share.moves][0] == (sha(3), True)
    assert h.ops["silu"].series["fraction"].moves == ()  # a new operator is not a move
    assert h.score.points[-1].value == pytest.approx(h.commits[-1].score)
    kinds = {(m.metric, m.op, m.sha) for m in h.regressions}
    assert ("fraction", "softmax", sha(4)) in kinds and ("own_kernel_share", "softmax",
                                                         sha(3)) in kinds
    doc = json.loads(json.dumps(h.to_dict()))
    assert doc["schema"] == "atrex.history/1" and len(doc["commits"]) == 5
    latest = {row["op"]: row for row in doc["latest"]}
    assert latest["rmsnorm"]["moved_by"]["fraction"]["sha"] == sha(3)


def test_retention_drops_old_pull_request_heads_and_keeps_the_branch(db_url, clock):
    store = SqlStore(db_url, clock=clock)
    try:
        history = HistoryStore(store, Retention(branch_days=0, pr_days=30))
        rep = data.fractions({"rmsnorm": 0.5})
        history.record("b1", REPO, sha(1), BRANCH, rep)
        history.record("p1", REPO, sha(2), PR, rep, pr=1)
        clock.now += 31 * 86400
        history.record("p2", REPO, sha(3), PR, rep, pr=2)  # recording applies the retention
        assert [e.sha for e in history.evaluations(REPO)] == [sha(1), sha(3)]
        strict = HistoryStore(store, Retention(branch_days=10, pr_days=30))
        assert strict.prune() == 1 and [e.sha for e in history.evaluations(REPO)] == [sha(3)]
    finally:
        store.close()


def test_the_history_shares_the_job_store_database(db_url, clock):
    store = SqlStore(db_url, clock=clock)
    try:
        HistoryStore(store).record("b1", REPO, sha(1), BRANCH, data.fractions({"x": 0.1}))
        job_id, _ = store.enqueue(NewJob("evaluate", "gpu", {"repo": REPO}))
        claimed = store.claim(["gpu"], "w", 10)
        assert claimed.id == job_id and store.complete(job_id, "w", {"ok": True})
        reopened = HistoryStore(SqlStore(db_url, clock=clock))
        assert [e.sha for e in reopened.evaluations(REPO)] == [sha(1)]
        reopened.store.close()
    finally:
        store.close()


def test_trend_and_sparkline():
    assert sparkline([0.1, 0.2, None, 0.3]) == "▁▅·█"
    assert sparkline([0.5, 0.5]) == "▅▅" and sparkline([None]) == "·"
    assert sparkline([0.2], low=0.0, high=0.4) == "▅"


def test_op_trends_take_the_last_comparable_commits(history, clock):
    for n, value in enumerate([0.40, 0.42, 0.41, 0.45], start=1):
        record_branch(history, clock, n, {"rmsnorm": value})
    record_branch(history, clock, 4, {"rmsnorm": 0.46})  # the same commit again: newest counts
    commits = one_per_commit(history.evaluations(REPO, kind=BRANCH))
    assert [e.sha for e in commits] == [sha(1), sha(2), sha(3), sha(4)]
    [trend] = op_trends(commits, [("rmsnorm", 0.50)], points=3)
    assert trend.branch == pytest.approx((0.42, 0.41, 0.46)) and trend.head == 0.50
    assert trend.change == pytest.approx(0.50 / 0.46 - 1)
    [absent] = op_trends(commits, [("newop", 0.3)], points=3)
    assert absent.branch == (None, None, None) and absent.last is None


WRITER = textwrap.dedent("""
    import sys
    from atrex.bot.history import BRANCH, HistoryStore
    from atrex.bot.store import SqlStore
    from tests.bot import history_data as data
    history = HistoryStore(SqlStore(sys.argv[1]))
    ops = {f"op{i}": 0.1 + i / 100 for i in range(12)}
    n = 0
    while True:
        n += 1
        history.record(f"w:{n}", "octo/kernels", f"{n:040x}", BRANCH, data.fractions(ops))
        print(n, flush=True)
""")


def test_nothing_recorded_is_lost_on_kill_9(db_url, tmp_path):
    HistoryStore(SqlStore(db_url)).store.close()  # tables exist before the writer races
    proc = subprocess.Popen([sys.executable, "-c", WRITER, db_url], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    acknowledged = []
    try:
        for line in proc.stdout:  # each line is printed after its transaction committed
            acknowledged.append(int(line))
            if len(acknowledged) >= 15:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    store = SqlStore(db_url)
    try:
        found = HistoryStore(store).evaluations(REPO)
        shas = {e.sha for e in found}
        assert {f"{n:040x}" for n in acknowledged} <= shas
        assert all(len(e.ops) == 12 for e in found)  # an evaluation and its ops: all or none
    finally:
        store.close()
