"""Worker lanes in-process with GPU-like numbers: default-branch evaluations recorded, the PR
comment's trend built from them, and `/atrex dashboard`. The GitHub side is the real client
against the fake; the runner's `evaluate` is replaced through `Runtime.evaluate` (a CPU cannot
time), as in test_worker.py."""

from __future__ import annotations

import pytest
from atrex.bot.app import open_store
from atrex.bot.dashboard.access import AccessStore
from atrex.bot.github import GitHubApp
from atrex.bot.history import BRANCH
from atrex.bot.jobs import Runtime
from atrex.bot.newjobs import branch_job, command_job, evaluate_job
from atrex.bot.prhistory import history_for
from atrex.bot.render import STICKY_MARKER
from atrex.bot.store import DONE
from atrex.bot.worker import lanes_for

from . import history_data as data
from .world import KernelRepo

REPO = "octo/kernels"
PUBLIC_URL = "https://atrex.example.com"


@pytest.fixture
def config(config):
    config.data_dir.mkdir(parents=True, exist_ok=True)
    return config.with_(public_url=PUBLIC_URL, trend_points=5)


@pytest.fixture
def kernels(fake, tmp_path):
    (tmp_path / "git").mkdir()
    repo = KernelRepo(tmp_path / "git", "kernels")
    fake.add_repo(REPO, str(repo.remote))
    fake.set_permission(REPO, "maintainer", "write")
    fake.set_permission(REPO, "reader", "read")
    return repo


class Numbers:
    """`Runtime.evaluate`: reports with the next roofline fraction for each candidate label."""

    def __init__(self):
        self.head: list[float] = []
        self.base: list[float] = []

    def __call__(self, repo, plan, options, progress=None):
        return {label: data.fractions({"rmsnorm": getattr(self, label).pop(0)})
                for label in {c.label for cands in plan.values() for c in cands}}


def runtime(config, numbers) -> Runtime:
    app = GitHubApp(config)
    return Runtime(config=config, store=open_store(config), repo_api=app.repo,
                   token=app.tokens.token, github_client=app.client, evaluate=numbers)


def drain(rt: Runtime) -> None:
    lanes = lanes_for(rt, (0,), light=True)
    while any(lane.run_once() for lane in lanes):
        pass


def test_pushes_build_the_history_and_the_pr_comment_shows_the_trend(fake, config, kernels):
    numbers = Numbers()
    rt = runtime(config, numbers)
    for n, fraction in enumerate([0.40, 0.42, 0.30], start=1):
        fake.add_pull(REPO, 10 + n, f"merged-{n}")
        sha = kernels.touch_kernel(f"commit {n}")
        kernels.push("main")
        fake.oauth.associate(REPO, sha, 10 + n)
        numbers.head.append(fraction)
        rt.store.enqueue(branch_job(REPO, 1, "main", sha, "push"))
        drain(rt)
    jobs = rt.store.list(kind="evaluate_branch")
    assert [j.state for j in jobs] == [DONE] * 3 and [j.result["pr"] for j in jobs] == [11, 12,
                                                                                        13]
    history = history_for(config, rt.store)
    commits = history.evaluations(REPO, kind=BRANCH)
    assert [e.op("rmsnorm").fraction for e in commits] == pytest.approx([0.40, 0.42, 0.30])

    kernels.branch("tune")
    head = kernels.touch_kernel("tuned")
    kernels.push("tune")
    fake.add_pull(REPO, 1, "tune")
    numbers.head.append(0.45)
    numbers.base.append(0.30)
    rt.store.enqueue(evaluate_job(REPO, 1, 1, head, False, "pull_request.opened"))
    drain(rt)
    [sticky] = [c for c in fake.comments_on(REPO, 1) if STICKY_MARKER in c["body"]]
    row = next(line for line in sticky["body"].splitlines() if line.startswith("| `rmsnorm` | `"))
    assert row == "| `rmsnorm` | `▆▇▁` → `█` | 0.300–0.420 | 0.300 | 0.450 | +50.0% |"
    assert f"{PUBLIC_URL}/dashboard/{REPO}" in sticky["body"]


def test_atrex_dashboard_posts_the_links_and_rotates_the_secret(fake, config, kernels):
    rt = runtime(config, Numbers())
    fake.add_pull(REPO, 1, "main")

    def command(author: str, body: str) -> str:
        comment = fake.add_comment(REPO, 1, author, body)
        args = body.split()[2:]
        rt.store.enqueue(command_job(REPO, 1, 1, comment["id"], author, "dashboard", args, None))
        drain(rt)
        return next(c["body"] for c in fake.comments_on(REPO, 1, fake.bot_login)
                    if f"reply job={rt.store.list(kind='command')[-1].id}" in c["body"])

    first = command("maintainer", "/atrex dashboard")
    secret = AccessStore(rt.store).link_secret(REPO)
    assert f"{PUBLIC_URL}/dashboard/{REPO}?key={secret}" in first
    again = command("maintainer", "/atrex dashboard")
    assert f"?key={secret}" in again  # asking again does not end the link
    rotated = command("maintainer", "/atrex dashboard rotate")
    new = AccessStore(rt.store).link_secret(REPO)
    assert new != secret and f"?key={new}" in rotated and "stopped working" in rotated
    refused = command("reader", "/atrex dashboard")
    assert "needs write permission" in refused and AccessStore(rt.store).link_secret(REPO) == new
