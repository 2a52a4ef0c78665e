"""End to end: the real server and worker processes, the GitHub fake, real git repositories.

Deliveries are GitHub's published example payloads adapted to this world, signed and POSTed over
HTTP to `python -m atrex.bot serve` (gunicorn); `python -m atrex.bot worker` evaluates with the
runner on the CPU (Triton interpreter). Processes are killed with SIGKILL to show nothing is lost
or repeated.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
from atrex.bot.render import STICKY_MARKER
from atrex.bot.store import DONE, FAILED, WAITING, SqlStore

from .conftest import APP_ID, SECRET, bot_settings, process_env
from .github_fake import FakeGitHub
from .world import (
    BotProcess,
    BotServer,
    KernelRepo,
    comment_payload,
    deliver,
    payload,
    pr_payload,
    wait_for,
)

pytestmark = pytest.mark.slow
OWNER = "octo"


class World:
    def __init__(self, base: Path, fake: FakeGitHub, env: dict[str, str]):
        self.base, self.fake, self.env = base, fake, env
        self.server = BotServer(env, base / "server.log")
        self.worker: BotProcess | None = None
        self._store: SqlStore | None = None
        self._workers = 0

    @property
    def store(self) -> SqlStore:
        if self._store is None:  # after the server created the data directory
            self._store = SqlStore(f"sqlite:///{self.base / 'data' / 'atrex-bot.db'}")
        return self._store

    @property
    def url(self) -> str:
        return self.server.url

    def start_worker(self) -> BotProcess:
        self._workers += 1
        self.worker = BotProcess(["worker"], self.env, self.base / f"worker{self._workers}.log")
        return self.worker.start()

    def logs(self) -> str:
        names = ["server.log"] + [f"worker{i}.log" for i in range(1, self._workers + 1)]
        return "\n".join(f"--- {n}\n{(self.base / n).read_text(errors='replace')[-6000:]}"
                         for n in names if (self.base / n).exists())

    def repo(self, name: str) -> KernelRepo:
        (self.base / name).mkdir()
        kernels = KernelRepo(self.base / name, name)
        self.fake.add_repo(f"{OWNER}/{name}", str(kernels.remote), installation_id=1)
        return kernels

    def open_pr(self, kernels: KernelRepo, number: int, branch: str, action: str = "opened",
                fork: tuple[str, Path] | None = None, delivery_id: str | None = None,
                draft: bool = False):
        name = f"{OWNER}/{kernels.remote.stem}"
        if (name, number) not in self.fake.state.pulls:
            if fork:
                self.fake.add_repo(fork[0], str(fork[1]), installation_id=1)
            self.fake.add_pull(name, number, branch, head_repo=fork[0] if fork else None)
        head_repo = fork[0] if fork else name
        data = pr_payload(action, name, number, self.fake.sha(head_repo, branch), branch,
                          head_repo=head_repo, clone_url=str(kernels.remote),
                          head_clone_url=str(fork[1]) if fork else "", draft=draft)
        return deliver(self.url, "pull_request", data, SECRET, delivery_id)

    def comment(self, repo: str, number: int, login: str, body: str,
                delivery_id: str | None = None):
        comment = self.fake.add_comment(repo, number, login, body)
        response = deliver(self.url, "issue_comment", comment_payload(repo, number, comment),
                           SECRET, delivery_id)
        return comment, response

    def jobs(self, kind: str | None = None, repo: str | None = None):
        return [j for j in self.store.list(kind=kind)
                if repo is None or j.payload.get("repo") == repo]

    def settled(self, repo: str) -> bool:
        """Every job of the repository finished (done, failed, or parked for approval)."""
        jobs = self.jobs(repo=repo)
        return bool(jobs) and all(j.state in (DONE, FAILED, WAITING) for j in jobs)

    def wait_settled(self, repo: str, timeout: float = 180) -> None:
        wait_for(lambda: self.settled(repo), timeout=timeout,
                 what=f"jobs of {repo} to finish\n{self.logs()}")

    def sticky(self, repo: str, number: int) -> list[dict]:
        return [c for c in self.fake.comments_on(repo, number, self.fake.bot_login)
                if STICKY_MARKER in c["body"]]


@pytest.fixture(scope="module")
def world(app_key, tmp_path_factory):
    base = tmp_path_factory.mktemp("e2e")
    fake = FakeGitHub(APP_ID, app_key.public_key).start()
    # /atrex optimize is turned off here (its "not configured" answer is tested below);
    # test_agent_e2e.py runs the agent end to end
    env = process_env({**bot_settings(fake, app_key, base / "data"),
                       "ATREX_OPTIMIZE_RUNNER": "none"})
    w = World(base, fake, env)
    w.server.start()
    w.start_worker()
    yield w
    w.worker.stop()
    w.server.stop()
    w.store.close()
    fake.stop()


def test_pr_check_run_and_sticky_comment_lifecycle(world):
    kernels = world.repo("lifecycle")
    repo = f"{OWNER}/lifecycle"
    kernels.branch("tune")
    sha1 = kernels.touch_kernel("first tuning")
    kernels.push("tune")
    delivery = str(uuid.uuid4())
    response = world.open_pr(kernels, 1, "tune", delivery_id=delivery)
    assert response.status_code == 202, response.text
    world.wait_settled(repo)

    [run] = world.fake.runs_for(repo, sha1)
    # correct on the CPU shape, the GPU shapes not evaluated, nothing timed: neutral, and says so
    assert run["status"] == "completed" and run["conclusion"] == "neutral", run
    assert [s for s, _ in run["_history"]][:2] == ["queued", "in_progress"]
    [job] = world.jobs("evaluate", repo)
    report = json.loads(world.store.effect(job.id, "reports"))["head"]
    assert [(o["name"], o["status"], o["own_kernel_share"]) for o in report["ops"]] == [
        ("rmsnorm", "pass", 1.0)]
    [sticky] = world.sticky(repo, 1)
    row = next(line for line in sticky["body"].splitlines() if line.startswith("| `rmsnorm`"))
    assert "✅ pass" in row and "100%" in row and "n/a (no GPU)" in row
    assert sha1[:12] in sticky["body"] and "rmsnorm" in run["output"]["summary"]
    assert "`cpu-small`" in sticky["body"]
    assert "**Why neutral**: nothing was timed" in sticky["body"]
    assert "**Not evaluated** (GPU shapes; this runner has no GPU): `rmsnorm`: `decode-64`, " \
        "`prefill-8192`" in sticky["body"]
    assert "`decode-64`" in run["output"]["summary"] and "Why neutral" in run["output"]["summary"]

    # a redelivery, and a new delivery of the same event, change nothing
    again = world.open_pr(kernels, 1, "tune", delivery_id=delivery)
    assert again.status_code == 200 and again.json()["duplicate_delivery"]
    same = world.open_pr(kernels, 1, "tune", action="reopened")
    assert same.status_code == 202 and same.json()["jobs"] == [{"id": job.id, "new": False}]
    time.sleep(1.0)
    assert len(world.jobs(repo=repo)) == 1 and len(world.fake.runs_for(repo)) == 1
    assert world.sticky(repo, 1)[0]["_edits"] == 0

    # a second push: a new check run, the same sticky comment edited in place
    sha2 = kernels.touch_kernel("second tuning")
    kernels.push("tune")
    assert world.open_pr(kernels, 1, "tune", action="synchronize").status_code == 202
    world.wait_settled(repo)
    [run2] = world.fake.runs_for(repo, sha2)
    assert run2["conclusion"] == "neutral"
    [edited] = world.sticky(repo, 1)
    assert edited["id"] == sticky["id"] and edited["_edits"] == 1 and sha2[:12] in edited["body"]
    assert len(world.fake.comments_on(repo, 1)) == 1


def test_worker_killed_mid_evaluation_completes_once(world):
    kernels = world.repo("crash")
    repo = f"{OWNER}/crash"
    kernels.branch("tune")
    sha = kernels.touch_kernel("crash me")
    kernels.push("tune")
    assert world.open_pr(kernels, 2, "tune").status_code == 202
    wait_for(lambda: any(r["status"] == "in_progress" for r in world.fake.runs_for(repo, sha)),
             timeout=60, what=f"evaluation to start\n{world.logs()}")
    time.sleep(1.0)  # inside the checkout / evaluation
    world.worker.kill9()
    [job] = world.jobs("evaluate", repo)
    assert job.state == "running" and job.attempts == 1
    world.start_worker()
    world.wait_settled(repo)

    [job] = world.jobs("evaluate", repo)
    assert job.state == DONE and job.attempts == 2
    [run] = world.fake.runs_for(repo, sha)
    assert run["conclusion"] == "neutral"
    assert [s for s, _ in run["_history"]].count("completed") == 1
    assert len(world.sticky(repo, 2)) == 1


def test_worker_killed_after_publishing_does_not_publish_twice(world):
    kernels = world.repo("late")
    repo = f"{OWNER}/late"
    kernels.branch("tune")
    sha = kernels.touch_kernel("late crash")
    kernels.push("tune")
    world.fake.hold("PATCH", r"/repos/octo/late/check-runs/\d+$", seconds=4,
                    body_contains='"completed"')
    assert world.open_pr(kernels, 3, "tune").status_code == 202
    wait_for(lambda: world.fake.state.held, timeout=120, what=f"the completion\n{world.logs()}")
    world.worker.kill9()  # the check run is completed on GitHub; the job is not marked done
    [run] = world.fake.runs_for(repo, sha)
    assert run["status"] == "completed"
    world.start_worker()
    world.wait_settled(repo)
    [job] = world.jobs("evaluate", repo)
    assert job.state == DONE and job.attempts == 2
    assert [s for s, _ in run["_history"]].count("completed") == 1
    assert len(world.sticky(repo, 3)) == 1 and len(world.fake.comments_on(repo, 3)) == 1


def _help_comments(world, repo: str, number: int, count: int):
    comments = [world.fake.add_comment(repo, number, "alice", "/atrex help")
                for _ in range(count)]
    return [(c, str(uuid.uuid4())) for c in comments]


def test_server_killed_during_deliveries_loses_and_duplicates_nothing(world):
    kernels = world.repo("kill")
    repo = f"{OWNER}/kill"
    kernels.branch("docs")
    kernels.commit("docs only", {"README.md": "docs\n"})
    kernels.push("docs")
    pr_delivery = str(uuid.uuid4())
    assert world.open_pr(kernels, 4, "docs", delivery_id=pr_delivery).status_code == 202
    sent = _help_comments(world, repo, 4, 40)
    acked: list[str] = []

    def barrage() -> None:
        for comment, delivery in sent:
            try:
                response = deliver(world.url, "issue_comment",
                                   comment_payload(repo, 4, comment), SECRET, delivery,
                                   timeout=5)
                if response.status_code == 202:
                    acked.append(delivery)
            except Exception:
                pass
            time.sleep(0.02)  # spread the deliveries so the kill lands in the middle

    thread = threading.Thread(target=barrage)
    thread.start()
    wait_for(lambda: len(acked) >= 12, timeout=30, interval=0.005,
             what="some deliveries acknowledged")
    world.server.kill9()
    thread.join()
    assert 12 <= len(acked) < len(sent)
    recorded = {j.payload["comment_id"] for j in world.jobs("command", repo)}
    by_delivery = {d: c["id"] for c, d in sent}
    assert {by_delivery[d] for d in acked} <= recorded  # every acknowledged job is durable

    world.server.start()
    for comment, delivery in sent:  # GitHub's "redeliver", for every delivery
        response = deliver(world.url, "issue_comment", comment_payload(repo, 4, comment),
                           SECRET, delivery)
        assert response.status_code in (200, 202)
    assert world.open_pr(kernels, 4, "docs", delivery_id=pr_delivery).status_code == 200
    world.wait_settled(repo)
    commands = world.jobs("command", repo)
    assert sorted(j.payload["comment_id"] for j in commands) == sorted(by_delivery.values())
    assert all(j.state == DONE for j in commands)
    replies = [c for c in world.fake.comments_on(repo, 4, world.fake.bot_login)
               if "atrex commands" in c["body"]]
    assert len(replies) == len(sent)  # one help reply per command, none twice
    for comment, _ in sent:
        assert sorted(world.fake.reactions_on(comment["id"])) == ["+1", "eyes"]
    [pr_job] = world.jobs("evaluate", repo)
    assert pr_job.state == DONE and pr_job.result["conclusion"] == "neutral"
    [run] = world.fake.runs_for(repo)
    assert run["conclusion"] == "neutral" and not world.sticky(repo, 4)


def test_signatures_and_malformed_bodies(world):
    body = json.dumps(payload("ping")).encode()
    assert deliver(world.url, "ping", body, SECRET).json()["pong"] is True
    assert deliver(world.url, "ping", body, SECRET, signature="sha256=" + "0" * 64) \
        .status_code == 401
    assert deliver(world.url, "ping", body, SECRET, signature="").status_code == 401
    assert deliver(world.url, "ping", body, "wrong secret").status_code == 401
    assert deliver(world.url, "ping", body, SECRET, signature="sha1=abc").status_code == 401
    assert deliver(world.url, "ping", b"{not json", SECRET).status_code == 400
    assert deliver(world.url, "ping", b"[1, 2]", SECRET).status_code == 400
    broken = pr_payload("opened", "octo/x", 1, "a" * 40, "b")
    del broken["pull_request"]["head"]
    response = deliver(world.url, "pull_request", broken, SECRET)
    assert response.status_code == 400 and "pull_request.head" in response.json()["error"]
    bad_sha = pr_payload("opened", "octo/x", 1, "not-a-sha", "b")
    assert deliver(world.url, "pull_request", bad_sha, SECRET).status_code == 400
    labeled = deliver(world.url, "pull_request", payload("pull_request.labeled"), SECRET)
    assert labeled.status_code == 200 and labeled.json()["ignored"] == "pull_request.labeled"
    assert deliver(world.url, "star", {"action": "created"}, SECRET).status_code == 200
    edited = payload("issue_comment.edited")
    edited["comment"]["body"] = "/atrex rerun"
    assert deliver(world.url, "issue_comment", edited, SECRET).json()["ignored"]
    assert not world.jobs(repo="octo/x")


def test_commands_are_authorized_and_answered(world):
    kernels = world.repo("commands")
    repo = f"{OWNER}/commands"
    kernels.branch("docs")
    kernels.commit("docs", {"README.md": "more docs\n"})
    kernels.push("docs")
    world.open_pr(kernels, 5, "docs")
    world.fake.set_permission(repo, "maintainer", "admin")
    world.fake.set_permission(repo, "reader", "read")

    refused, r1 = world.comment(repo, 5, "reader", "/atrex optimize rmsnorm")
    malformed, r2 = world.comment(repo, 5, "maintainer", "/atrex approve xyz")
    ordinary, r3 = world.comment(repo, 5, "maintainer", "nice work, /atrex rerun later")
    bot_own = world.fake.add_comment(repo, 5, world.fake.bot_login, "/atrex rerun", "Bot")
    r4 = deliver(world.url, "issue_comment", comment_payload(repo, 5, bot_own), SECRET)
    assert (r1.status_code, r2.status_code) == (202, 202)
    assert not r3.json()["jobs"] and not r4.json()["jobs"]
    world.wait_settled(repo)

    assert not world.jobs("optimize", repo)
    replies = world.fake.comments_on(repo, 5, world.fake.bot_login)
    assert any("@reader `/atrex optimize` needs write permission" in c["body"] for c in replies)
    assert any("`xyz` is not a commit SHA" in c["body"] for c in replies)
    assert world.fake.reactions_on(refused["id"]) == ["eyes", "-1"]
    assert world.fake.reactions_on(malformed["id"]) == ["eyes", "confused"]
    assert world.fake.reactions_on(ordinary["id"]) == []

    # an authorized optimize is queued; without an agent configured it fails cleanly
    asked, response = world.comment(repo, 5, "maintainer", "/atrex optimize rmsnorm")
    assert response.status_code == 202
    world.wait_settled(repo)
    [optimize] = world.jobs("optimize", repo)
    assert optimize.state == FAILED and "not configured" in optimize.error
    assert optimize.payload["ops"] == ["rmsnorm"]
    assert any("agent is not configured" in c["body"]
               for c in world.fake.comments_on(repo, 5, world.fake.bot_login))
    assert world.fake.reactions_on(asked["id"]) == ["eyes", "+1", "confused"]

    # /atrex rerun evaluates the head again with a new check run
    _, response = world.comment(repo, 5, "maintainer", "/atrex rerun")
    world.wait_settled(repo)
    assert len(world.fake.runs_for(repo)) == 2
    assert all(r["conclusion"] == "neutral" for r in world.fake.runs_for(repo))


def test_fork_pull_request_runs_only_after_approval_of_that_commit(world):
    kernels = world.repo("forked")
    repo = f"{OWNER}/forked"
    fork_path = kernels.fork(world.base / "forked", "contributor-fork")
    kernels.branch("feature")
    sha1 = kernels.touch_kernel("from a fork")
    kernels.push("feature", remote="fork")
    fork = ("contributor/forked", fork_path)
    assert world.open_pr(kernels, 6, "feature", fork=fork).status_code == 202
    world.wait_settled(repo)
    [job] = world.jobs("evaluate", repo)
    assert job.state == WAITING
    [run] = world.fake.runs_for(repo, sha1)
    assert run["status"] == "queued" and "approval" in run["output"]["title"]
    assert "in_progress" not in [s for s, _ in run["_history"]]

    world.fake.set_permission(repo, "maintainer", "maintain")
    world.fake.set_permission(repo, "contributor", "read")
    world.comment(repo, 6, "contributor", f"/atrex approve {sha1}")
    world.comment(repo, 6, "maintainer", f"/atrex approve {'0' * 40}")
    world.wait_settled(repo)
    assert world.store.get(job.id).state == WAITING
    assert not world.store.is_approved(repo, 6, sha1)

    world.comment(repo, 6, "maintainer", f"/atrex approve {sha1[:10]}")
    world.wait_settled(repo)
    assert world.store.get(job.id).state == DONE
    [run] = world.fake.runs_for(repo, sha1)
    assert run["conclusion"] == "neutral" and len(world.sticky(repo, 6)) == 1

    # a new push needs a new approval
    sha2 = kernels.touch_kernel("another push")
    kernels.push("feature", remote="fork")
    world.open_pr(kernels, 6, "feature", action="synchronize", fork=fork)
    world.wait_settled(repo)
    [run2] = world.fake.runs_for(repo, sha2)
    assert run2["status"] == "queued" and world.jobs("evaluate", repo)[-1].state == WAITING


def test_github_502_and_secondary_rate_limit_then_recovery(world):
    kernels = world.repo("flaky")
    repo = f"{OWNER}/flaky"
    kernels.branch("docs")
    kernels.commit("docs", {"README.md": "flaky\n"})
    kernels.push("docs")
    world.fake.set_permission(repo, "maintainer", "write")
    world.fake.inject("POST", r"/repos/octo/flaky/check-runs$", 502, apply=True)
    world.fake.inject("GET", r"/repos/octo/flaky/pulls/7$", 502)
    world.fake.inject("PATCH", r"/repos/octo/flaky/check-runs/\d+$", 502)
    world.fake.inject_secondary_rate_limit("POST", r"/repos/octo/flaky/issues/7/comments$")
    world.fake.inject_secondary_rate_limit("POST", r"/reactions$")
    assert world.open_pr(kernels, 7, "docs").status_code == 202
    helped, _ = world.comment(repo, 7, "maintainer", "/atrex help")
    world.wait_settled(repo)

    assert not world.fake.state.faults or all(f.times == 0 for f in world.fake.state.faults)
    [run] = world.fake.runs_for(repo)  # the 502 after creating did not create a second one
    assert run["conclusion"] == "neutral"
    statuses = [s for m, p, s in world.fake.requests(path=r"/repos/octo/flaky/")]
    assert 502 in statuses and 403 in statuses
    [reply] = world.fake.comments_on(repo, 7, world.fake.bot_login)
    assert "atrex commands" in reply["body"]
    assert world.fake.reactions_on(helped["id"]) == ["eyes", "+1"]
    assert all(j.state == DONE for j in world.jobs(repo=repo))


def test_drafts_rerequests_and_installations(world):
    kernels = world.repo("misc")
    repo = f"{OWNER}/misc"
    kernels.branch("docs")
    kernels.commit("docs", {"README.md": "draft\n"})
    kernels.push("docs")
    draft = world.open_pr(kernels, 8, "docs", draft=True)
    assert draft.status_code == 202 and draft.json()["jobs"] == []
    assert world.open_pr(kernels, 8, "docs", action="ready_for_review").status_code == 202
    world.wait_settled(repo)
    [run] = world.fake.runs_for(repo)

    rerequest = payload("check_run.rerequested")
    rerequest["repository"]["full_name"] = repo
    rerequest["installation"] = {"id": 1}
    rerequest["check_run"].update(external_id=run["external_id"], head_sha=run["head_sha"],
                                  app={**rerequest["check_run"]["app"], "id": APP_ID})
    assert deliver(world.url, "check_run", rerequest, SECRET).status_code == 202
    world.wait_settled(repo)
    assert len(world.fake.runs_for(repo)) == 2

    other_app = json.loads(json.dumps(rerequest))
    other_app["check_run"]["external_id"] = ""
    assert deliver(world.url, "check_run", other_app, SECRET).json()["jobs"] == []

    created = payload("installation.created")
    created["installation"]["id"] = 77
    deliver(world.url, "installation", created, SECRET)
    added = payload("installation_repositories.added")
    added["installation"]["id"] = 77
    deliver(world.url, "installation_repositories", added, SECRET)
    assert world.store.installed_repos() == {"Codertocat/Hello-World": 77,
                                             "Codertocat/Space": 77}
    removed = payload("installation_repositories.removed")
    removed["installation"]["id"] = 77
    removed["repositories_removed"] = added["repositories_added"]
    deliver(world.url, "installation_repositories", removed, SECRET)
    assert world.store.installed_repos() == {"Codertocat/Hello-World": 77}
    deleted = payload("installation.deleted")
    deleted["installation"]["id"] = 77
    deliver(world.url, "installation", deleted, SECRET)
    assert world.store.installed_repos() == {}
