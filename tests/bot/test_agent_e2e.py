"""`/atrex optimize` and scheduled runs end to end, on the CPU.

The real server (`python -m atrex.bot serve`) takes signed webhook deliveries; the worker is
`python -m tests.bot.agent_harness worker`: the real worker with the bundled agent, whose only
test-specific part is the agent's documented timer seam (the runner measures no time on a CPU).
GitHub is the stateful fake over loopback HTTP, the repositories are bare git remotes on disk, and
every candidate the agent makes is judged by the runner under the Triton interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from atrex.agent.pr import marker_for
from atrex.bot.config import load_config
from atrex.bot.github import GitHubApp
from atrex.bot.newjobs import SCHEDULED
from atrex.bot.scheduler import run_once
from atrex.bot.store import DONE, FAILED, WAITING, SqlStore

from .conftest import APP_ID, SECRET, bot_settings, process_env
from .github_fake import FakeGitHub
from .world import (
    ROOT,
    BotProcess,
    BotServer,
    KernelRepo,
    comment_payload,
    deliver,
    git,
    payload,
    wait_for,
)

pytestmark = pytest.mark.slow
OWNER = "octo"
NAIVE = ROOT / "benchmarks" / "agent_naive"
# small budgets: one autotune round of one candidate, one correctness draw per shape
AGENT_TOML = ('[repo]\nops_root = "ops"\n\n[thresholds]\ntrials = 1\n\n'
              '[agent]\nmax_iters = 1\nautotune_batch = 1\n')
SCHEDULE = "\n[schedule]\nenabled = true\nevery_hours = 24\nmax_prs = 1\n"
BRANCH = "atrex/optimize/rmsnorm"


class World:
    def __init__(self, base: Path, fake: FakeGitHub, settings: dict[str, str]):
        self.base, self.fake, self.settings = base, fake, settings
        self.env = process_env(settings)
        self.server = BotServer(self.env, base / "server.log")
        self.worker = BotProcess(["worker"], self.env, base / "worker.log",
                                 module="tests.bot.agent_harness")
        self._store: SqlStore | None = None

    @property
    def store(self) -> SqlStore:
        if self._store is None:
            self._store = SqlStore(f"sqlite:///{self.base / 'data' / 'atrex-bot.db'}")
        return self._store

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{(self.base / n).read_text(errors='replace')[-8000:]}"
                         for n in ("server.log", "worker.log") if (self.base / n).exists())

    def repo(self, name: str, ops: dict[str, Path], toml: str,
             importance: dict[str, float] | None = None) -> KernelRepo:
        (self.base / name).mkdir()
        kernels = KernelRepo(self.base / name, name, ops=ops, toml=toml)
        for op, value in (importance or {}).items():
            meta = kernels.work / "ops" / op / "metadata.json"
            meta.write_text(json.dumps({**json.loads(meta.read_text()),
                                        "importance_score": value}))
        if importance:
            kernels.commit("trace importance")
            git(kernels.work, "push", "origin", "main")
        self.fake.add_repo(f"{OWNER}/{name}", str(kernels.remote), installation_id=1)
        return kernels

    def comment(self, repo: str, number: int, login: str, body: str):
        comment = self.fake.add_comment(repo, number, login, body)
        response = deliver(self.server.url, "issue_comment",
                           comment_payload(repo, number, comment), SECRET)
        assert response.status_code == 202, response.text
        return comment

    def jobs(self, kind: str | None = None, repo: str | None = None):
        return [j for j in self.store.list(kind=kind)
                if repo is None or j.payload.get("repo") == repo]

    def wait_settled(self, repo: str, timeout: float = 300) -> None:
        def settled() -> bool:
            jobs = self.jobs(repo=repo)
            return bool(jobs) and all(j.state in (DONE, FAILED, WAITING) for j in jobs)

        wait_for(settled, timeout=timeout, interval=0.2, what=f"jobs of {repo}\n{self.logs()}")

    def replies(self, repo: str, number: int, words: str) -> list[dict]:
        return [c for c in self.fake.comments_on(repo, number, self.fake.bot_login)
                if words in c["body"]]


@pytest.fixture(scope="module")
def world(app_key, tmp_path_factory):
    base = tmp_path_factory.mktemp("agent-e2e")
    fake = FakeGitHub(APP_ID, app_key.public_key).start()
    w = World(base, fake, bot_settings(fake, app_key, base / "data"))
    w.server.start()
    w.worker.start()
    yield w
    w.worker.stop()
    w.server.stop()
    w.store.close()
    fake.stop()


def _branch_kernel(kernels: KernelRepo, branch: str) -> str:
    return git(kernels.remote, "show", f"refs/heads/{branch}:ops/rmsnorm/kernel.py")


def test_optimize_command_opens_then_updates_one_follow_up_pr(world):
    kernels = world.repo("agentic", {"rmsnorm": NAIVE / "rmsnorm"}, AGENT_TOML)
    repo = f"{OWNER}/agentic"
    naive = (NAIVE / "rmsnorm" / "kernel.py").read_text()
    kernels.branch("tune")
    head = kernels.touch_kernel("a reviewer's note")
    kernels.push("tune")
    world.fake.add_pull(repo, 1, "tune", author="contributor")
    world.fake.set_permission(repo, "maintainer", "write")

    asked = world.comment(repo, 1, "maintainer", "/atrex optimize rmsnorm")
    world.wait_settled(repo)
    [job] = world.jobs("optimize", repo)
    assert job.state == DONE, job.error
    [follow] = [p for p in world.fake.pulls_of(repo) if p.number != 1]
    assert (follow.head_ref, follow.base_ref, follow.author) == (BRANCH, "tune",
                                                                 world.fake.bot_login)
    assert marker_for("rmsnorm") in follow.body and "| own-kernel share |" in follow.body
    assert "Requested with `/atrex optimize` in #1" in follow.body and "INJECTED" in follow.body
    # the new branch is in the bare remote: one atrex commit on top of the PR's head
    assert git(kernels.remote, "rev-parse", f"{BRANCH}~1") == head
    assert git(kernels.remote, "log", "-1", "--format=%an", BRANCH) == "atrex"
    tuned = _branch_kernel(kernels, BRANCH)
    assert tuned != naive.strip() and "BLOCK_SIZE = 64\n" not in tuned
    url = f"{world.fake.root}/{repo}/pull/{follow.number}"
    [reply] = world.replies(repo, 1, "**atrex optimize**")
    assert f"### `rmsnorm`: opened #{follow.number}" in reply["body"] and url in reply["body"]
    assert "| own-kernel share |" in reply["body"] and "injected by a test harness" in reply["body"]
    assert world.fake.reactions_on(asked["id"]) == ["eyes", "+1", "rocket"]
    assert job.result["pr_url"] == url

    # again, naming no operator: the PR's changed ones (rmsnorm); the same PR is updated
    again = world.comment(repo, 1, "maintainer", "/atrex optimize")
    world.wait_settled(repo)
    second = world.jobs("optimize", repo)[-1]
    assert second.state == DONE and second.payload["ops"] == [], second.error
    assert [p.number for p in world.fake.pulls_of(repo, None)] == [1, follow.number]
    assert world.fake.requests("PATCH", rf"/repos/{repo}/pulls/{follow.number}$")
    assert _branch_kernel(kernels, BRANCH) == tuned  # same winner: no second commit
    replies = world.replies(repo, 1, "**atrex optimize**")
    assert len(replies) == 2 and f"`rmsnorm`: updated #{follow.number}" in replies[1]["body"]
    assert "already had this kernel: no new commit" in replies[1]["body"]
    assert world.fake.reactions_on(again["id"]) == ["eyes", "+1", "rocket"]


def test_optimize_with_a_bad_agent_table_names_the_field(world):
    kernels = world.repo("badagent", {"rmsnorm": NAIVE / "rmsnorm"}, AGENT_TOML)
    repo = f"{OWNER}/badagent"
    kernels.branch("tune")
    kernels.commit("budget", {"atrex.toml": AGENT_TOML.replace("max_iters = 1",
                                                               'max_iters = "many"')})
    kernels.push("tune")
    world.fake.add_pull(repo, 1, "tune")
    world.fake.set_permission(repo, "maintainer", "admin")
    asked = world.comment(repo, 1, "maintainer", "/atrex optimize rmsnorm")
    world.wait_settled(repo)
    [reply] = world.replies(repo, 1, "**atrex optimize**")
    assert "`agent.max_iters` in `atrex.toml`: must be of type int" in reply["body"]
    assert world.fake.reactions_on(asked["id"]) == ["eyes", "+1", "confused"]
    assert world.fake.pulls_of(repo) == [world.fake.state.pulls[(repo, 1)]]


def _install(world, names: list[str]) -> None:
    created = payload("installation.created")
    created["installation"]["id"] = 1
    created["repositories"] = [{"id": i, "name": n.split("/")[1], "full_name": n,
                                "private": False} for i, n in enumerate(names)]
    assert deliver(world.server.url, "installation", created, SECRET).status_code in (200, 202)


def _schedule_cli(world) -> str:
    proc = subprocess.run([sys.executable, "-m", "atrex.bot", "schedule", "run-once"], cwd=ROOT,
                          env=world.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_scheduled_runs_open_at_most_max_prs_and_never_a_duplicate(world):
    ops = {"rmsnorm": NAIVE / "rmsnorm", "silu_and_mul": NAIVE / "silu_and_mul"}
    world.repo("sched", ops, AGENT_TOML + SCHEDULE, {"rmsnorm": 0.7, "silu_and_mul": 0.3})
    world.repo("plain", {"rmsnorm": NAIVE / "rmsnorm"}, AGENT_TOML)
    world.repo("badsched", {"rmsnorm": NAIVE / "rmsnorm"},
               AGENT_TOML + '\n[schedule]\nenabled = true\nevery_hours = "daily"\n')
    repos = [f"{OWNER}/{n}" for n in ("sched", "plain", "badsched")]
    _install(world, repos)
    assert set(repos) <= set(world.store.installed_repos())

    # cron: `atrex schedule run-once` records the due runs, the worker runs them
    out = _schedule_cli(world)
    assert "octo/sched: enqueued (job" in out and "octo/plain: not opted in" in out
    assert "octo/badsched: invalid schedule: atrex.toml: schedule.every_hours: must be a " \
           "number" in out
    world.wait_settled("octo/sched")
    [first] = world.jobs(SCHEDULED, "octo/sched")
    assert first.state == DONE, first.error
    assert first.result["chosen"] == ["rmsnorm"] and first.result["ranked"] == [
        "rmsnorm", "silu_and_mul"]  # by importance, and only max_prs = 1 of them
    assert "nothing was timed on this machine" in first.result["basis"]
    [pull] = world.fake.pulls_of("octo/sched")
    assert (pull.head_ref, pull.base_ref) == (BRANCH, "main")
    assert "Opened by atrex's scheduled optimization run" in pull.body
    assert "ranked by importance" in pull.body and "INJECTED" in pull.body
    assert first.result["prs"] == [{"op": "rmsnorm", "action": "opened", "number": pull.number,
                                    "url": f"{world.fake.root}/octo/sched/pull/{pull.number}"}]
    assert not world.jobs(SCHEDULED, "octo/plain") and not world.jobs(SCHEDULED, "octo/badsched")

    # the same period again (a restart, cron twice): nothing new
    again = _schedule_cli(world)
    periods = {j.payload["period"] for j in world.jobs(SCHEDULED, "octo/sched")}
    assert "octo/sched: already enqueued" in again or len(periods) == 2  # unless midnight UTC

    # the next period: rmsnorm has its open atrex PR, so the next operator is tried instead
    config = load_config(env=world.settings)
    decisions = run_once(world.store, GitHubApp(config).repo, now=time.time() + 2 * 86400)
    assert {d.repo: d.action for d in decisions}["octo/sched"] == "enqueued"
    world.wait_settled("octo/sched")
    second = world.jobs(SCHEDULED, "octo/sched")[-1]
    assert second.state == DONE and second.id != first.id, second.error
    assert second.result["skipped"] == {"rmsnorm": f"open atrex pull request #{pull.number}"}
    assert second.result["chosen"] == ["silu_and_mul"] and second.result["prs"] == []
    assert second.result["ops"]["silu_and_mul"]["state"] == "no_gain"
    assert world.fake.pulls_of("octo/sched") == [pull]  # no duplicate, nothing without a gain
    assert not world.fake.pulls_of("octo/plain") and not world.fake.pulls_of("octo/badsched")
