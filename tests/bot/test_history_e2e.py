"""End to end: pushes to the default branch and pull requests end up in the history.

The real server and worker processes, GitHub's published `push` example payload adapted to a real
bare git repository, the GitHub fake (which also says which pull request merged a commit), the
runner on the CPU (Triton interpreter: statuses and own-kernel shares, no timing)."""

from __future__ import annotations

import time

import pytest
from atrex.bot.history import BRANCH, PR, HistoryStore
from atrex.bot.store import DONE, SqlStore

from .conftest import APP_ID, SECRET, bot_settings, process_env
from .github_fake import FakeGitHub
from .world import BotProcess, BotServer, KernelRepo, deliver, payload, pr_payload, wait_for

pytestmark = pytest.mark.slow
REPO = "octo/kernels"
PUBLIC_URL = "https://atrex.example.com"


@pytest.fixture(scope="module")
def world(app_key, tmp_path_factory):
    base = tmp_path_factory.mktemp("history-e2e")
    fake = FakeGitHub(APP_ID, app_key.public_key).start()
    env = process_env({**bot_settings(fake, app_key, base / "data"),
                       "ATREX_OPTIMIZE_RUNNER": "none", "ATREX_PUBLIC_URL": PUBLIC_URL})
    server = BotServer(env, base / "server.log").start()
    worker = BotProcess(["worker"], env, base / "worker.log").start()
    (base / "repo").mkdir()
    kernels = KernelRepo(base / "repo", "kernels")
    fake.add_repo(REPO, str(kernels.remote))
    store = SqlStore(f"sqlite:///{base / 'data' / 'atrex-bot.db'}")
    yield type("World", (), {"fake": fake, "server": server, "worker": worker,
                             "kernels": kernels, "store": store,
                             "history": HistoryStore(store), "base": base})
    worker.stop()
    server.stop()
    store.close()
    fake.stop()


def logs(world) -> str:
    return "\n".join((world.base / n).read_text(errors="replace")[-5000:]
                     for n in ("server.log", "worker.log"))


def push_payload(sha: str, ref: str = "refs/heads/main") -> dict:
    data = payload("push")
    data["ref"], data["after"] = ref, sha
    data["repository"].update(full_name=REPO, name="kernels", default_branch="main")
    return data


def settled(world) -> bool:
    jobs = world.store.list()
    return bool(jobs) and all(j.state in (DONE, "failed") for j in jobs)


def test_a_push_to_the_default_branch_is_evaluated_and_recorded(world):
    kernels, fake = world.kernels, world.fake
    fake.add_pull(REPO, 7, "feature")
    sha = kernels.touch_kernel("merged through #7")
    kernels.push("main")
    fake.oauth.associate(REPO, sha, 7)
    response = deliver(world.server.url, "push", push_payload(sha), SECRET)
    assert response.status_code == 202, response.text
    ignored = deliver(world.server.url, "push", push_payload(sha, "refs/heads/other"), SECRET)
    assert ignored.status_code == 202 and ignored.json()["jobs"] == []
    tag = payload("push.tag")
    tag["repository"].update(full_name=REPO, default_branch="main")
    assert deliver(world.server.url, "push", tag, SECRET).json()["jobs"] == []
    again = deliver(world.server.url, "push", push_payload(sha), SECRET)  # a new delivery id
    assert again.json()["jobs"] == [{"id": response.json()["jobs"][0]["id"], "new": False}]
    wait_for(lambda: settled(world), timeout=240, what=f"the branch job\n{logs(world)}")

    [job] = world.store.list(kind="evaluate_branch")
    assert job.state == DONE, job.error
    assert job.result["pr"] == 7 and job.result["sha"] == sha
    [e] = world.history.evaluations(REPO, kind=BRANCH)
    assert (e.sha, e.ref, e.pr, e.job_id) == (sha, "main", 7, job.id)
    assert e.env.key == "cpu/cpu" and not e.timed
    assert [(p.op, p.status, p.own_kernel_share) for p in e.ops] == [("rmsnorm", "pass", 1.0)]
    assert world.history.report(e.id).ops[0].name == "rmsnorm"


def test_a_pull_request_evaluation_is_recorded_and_links_the_dashboard(world):
    kernels, fake = world.kernels, world.fake
    kernels.branch("tune")
    head = kernels.touch_kernel("tuning")
    kernels.push("tune")
    fake.add_pull(REPO, 8, "tune")
    data = pr_payload("opened", REPO, 8, head, "tune", clone_url=str(kernels.remote))
    assert deliver(world.server.url, "pull_request", data, SECRET).status_code == 202
    wait_for(lambda: settled(world), timeout=240, what=f"the PR evaluation\n{logs(world)}")
    [e] = world.history.evaluations(REPO, kind=PR)
    assert (e.sha, e.pr) == (head, 8) and e.op("rmsnorm").status == "pass"
    [sticky] = [c for c in fake.comments_on(REPO, 8, fake.bot_login)]
    assert f"({PUBLIC_URL}/dashboard/{REPO})" in sticky["body"]
    time.sleep(0.5)
    assert len(world.history.evaluations(REPO)) == 2  # one branch commit, one PR head
