"""The PR path end to end: run_optimize_job on a real git checkout whose origin is a bare repository
on disk, PyGithub talking to the GitHub REST fake on loopback (tests/bot/github_fake.py, the same
fake the bot's tests use). A second run updates the same PR."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from atrex.agent.api import OptimizeRequest, run_optimize_job
from atrex.agent.github import PyGithubClient
from atrex.agent.pr import PublishRequest, branch_for, marker_for, publish
from conftest import NAIVE, speedup_timer

from tests.bot.github_fake import FakeGitHub

REPO = "acme/kernels"


@pytest.fixture
def github(checkout):
    """The GitHub fake holding REPO (its git data: the bare remote), and a token client for it."""
    fake = FakeGitHub().start()
    fake.add_repo(REPO, str(checkout[1]))
    yield fake, PyGithubClient.from_token(fake.installation_token(), base_url=fake.api_url)
    fake.stop()


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> tuple[Path, Path]:
    remote = tmp_path / "origin.git"
    git(tmp_path, "init", "--bare", "-b", "main", str(remote))
    work = tmp_path / "work"
    shutil.copytree(NAIVE / "rmsnorm", work / "ops" / "rmsnorm")
    (work / "atrex.toml").write_text('[repo]\nops_root = "ops"\n\n[agent]\nmax_iters = 1\n')
    git(work.parent, "init", "-b", "main", str(work))
    git(work, "-c", "user.name=dev", "-c", "user.email=dev@example.com", "add", ".")
    git(work, "-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit", "-m", "init")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "origin", "main")
    return work, remote


def _request(work: Path, out: Path, proposers: list[str], **kwargs) -> OptimizeRequest:
    return OptimizeRequest(checkout=work, repo_full_name=REPO, out_dir=out, ops=["rmsnorm"],
                           proposers=proposers, device="cpu", **kwargs)


def _branch_file(remote: Path, branch: str) -> str:
    return git(remote, "show", f"refs/heads/{branch}:ops/rmsnorm/kernel.py") + "\n"


def test_optimize_job_opens_then_updates_one_pr(checkout, github, tmp_path):
    work, remote = checkout
    fake, client = github
    head_before = git(work, "rev-parse", "HEAD")
    first = run_optimize_job(_request(work, tmp_path / "run1", ["autotune"]), client,
                             timer=_autotune_timer)
    op = first.ops[0]
    assert op.error is None and op.improved, op.summary
    assert op.pr.action == "opened" and op.pr.branch == branch_for("rmsnorm")
    assert op.pr.base == "main" and op.pr.title.startswith("atrex: faster `rmsnorm` kernel")
    assert "| own-kernel share |" in op.table
    [pull] = fake.pulls_of(REPO)
    assert pull.base_ref == "main" and pull.head_ref == "atrex/optimize/rmsnorm"
    assert pull.author == fake.bot_login and op.pr.url.endswith(f"/pull/{pull.number}")
    body = pull.body
    assert marker_for("rmsnorm") in body and "| own-kernel share |" in body
    assert "| roofline fraction" in body and "GPU-hour score" in body
    assert "Attempt log" in body and "INJECTED" in body  # honest about the test timer
    winner = (tmp_path / "run1" / "rmsnorm" / "kernel.py").read_text()
    assert _branch_file(remote, "atrex/optimize/rmsnorm") == winner

    second = run_optimize_job(_request(work, tmp_path / "run2", ["kb"]), client,
                              timer=_kb_timer)
    op2 = second.ops[0]
    assert op2.improved and op2.pr.action == "updated" and op2.pr.number == pull.number
    assert fake.pulls_of(REPO) == [pull] and len(fake.pulls_of(REPO, None)) == 1
    assert fake.requests("PATCH", f"/repos/{REPO}/pulls/{pull.number}$")
    assert "rmsnorm-row-tile" in _branch_file(remote, "atrex/optimize/rmsnorm")
    log = git(remote, "log", "--format=%an %s", "main..atrex/optimize/rmsnorm").splitlines()
    assert len(log) == 2 and all(line.startswith("atrex atrex: optimize rmsnorm")
                                 for line in log)
    assert git(work, "rev-parse", "HEAD") == head_before  # the caller's checkout is untouched
    assert git(work, "status", "--porcelain") == ""


def _autotune_timer(source: str, shape) -> float:
    return speedup_timer(source, shape) / (2.0 if "BLOCK_SIZE = 256" in source else 1.0)


def _kb_timer(source: str, shape) -> float:
    return speedup_timer(source, shape) / (5.0 if "knowledge-base entry" in source else 1.0)


def test_publish_targets_the_pr_head_branch_and_finds_prs_by_marker(checkout, github):
    work, remote = checkout
    fake, client = github
    git(work, "push", "origin", "main:feature/faster-norm")
    git(work, "push", "origin", "main:someone/renamed")
    kernel = work / "ops" / "rmsnorm" / "kernel.py"
    request = PublishRequest(
        checkout=work, repo_full_name=REPO, op="rmsnorm", kernel_path=kernel,
        kernel_source=kernel.read_text() + "# tuned\n", base_branch="feature/faster-norm",
        title="t", body=f"{marker_for('rmsnorm')}\nbody", commit_message="atrex: tune")
    opened = publish(request, client)
    [pull] = fake.pulls_of(REPO)
    assert opened.action == "opened" and pull.base_ref == "feature/faster-norm"
    again = publish(request, client)  # same kernel: no new commit, PR updated
    assert again.action == "updated" and again.commit is None and fake.pulls_of(REPO) == [pull]

    # an open atrex PR whose branch was renamed is found by its marker
    fake.state.pulls.clear()
    fake.add_pull(REPO, 1, "someone/renamed", title="old", body=f"{marker_for('rmsnorm')}\nold")
    found = publish(request, client)
    assert found.action == "updated" and found.branch == "someone/renamed"
    assert len(fake.pulls_of(REPO, None)) == 1
    assert _branch_file(remote, "someone/renamed").endswith("# tuned\n")


def test_github_refuses_a_second_open_pr_and_a_branch_that_was_never_pushed(checkout, github):
    from github import GithubException

    work, _ = checkout
    fake, client = github
    with pytest.raises(GithubException) as missing:
        client.create_pull(REPO, title="t", body="b", head="atrex/optimize/none", base="main")
    assert missing.value.status == 422 and missing.value.data["errors"][0]["field"] == "head"
    git(work, "push", "origin", "main:same")
    with pytest.raises(GithubException, match="No commits between"):
        client.create_pull(REPO, title="t", body="b", head="same", base="main")
    git(work, "-c", "user.name=dev", "-c", "user.email=dev@example.com", "commit",
        "--allow-empty", "-m", "x")
    git(work, "push", "origin", "HEAD:feature")
    first = client.create_pull(REPO, title="t", body="b", head="feature", base="main")
    with pytest.raises(GithubException, match="already exists"):
        client.create_pull(REPO, title="t", body="b", head="feature", base="main")
    assert client.find_open_pull(REPO, "feature", "<!-- none -->") == first
    updated = client.update_pull(REPO, first.number, title="t2", body="b2", base="same")
    assert updated.base == "same" and fake.pulls_of(REPO)[0].title == "t2"
    assert client.default_branch(REPO) == "main"
