"""The PR path end to end: run_optimize_job on a real git checkout whose origin is a bare repository
on disk, PyGithub talking to a GitHub REST fake on loopback. A second run updates the same PR."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import NAIVE, speedup_timer
from github_rest_fake import GitHubFake

from agent.api import OptimizeRequest, run_optimize_job
from agent.github import PyGithubClient
from agent.pr import PublishRequest, branch_for, marker_for, publish

REPO = "acme/kernels"


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


def test_optimize_job_opens_then_updates_one_pr(checkout, tmp_path):
    work, remote = checkout
    head_before = git(work, "rev-parse", "HEAD")
    with GitHubFake(REPO, remote) as fake:
        client = PyGithubClient.from_token("test-token", base_url=fake.url)
        first = run_optimize_job(_request(work, tmp_path / "run1", ["autotune"]), client,
                                 timer=_autotune_timer)
        op = first.ops[0]
        assert op.error is None and op.improved, op.summary
        assert op.pr.action == "opened" and op.pr.branch == branch_for("rmsnorm")
        assert len(fake.open_pulls()) == 1
        pull = fake.open_pulls()[0]
        assert pull["base"]["ref"] == "main" and pull["head"]["ref"] == "atrex/optimize/rmsnorm"
        body = pull["body"]
        assert marker_for("rmsnorm") in body and "| own-kernel share |" in body
        assert "| roofline fraction" in body and "GPU-hour score" in body
        assert "Attempt log" in body and "INJECTED" in body  # honest about the test timer
        winner = (tmp_path / "run1" / "rmsnorm" / "kernel.py").read_text()
        assert _branch_file(remote, "atrex/optimize/rmsnorm") == winner

        second = run_optimize_job(_request(work, tmp_path / "run2", ["kb"]), client,
                                  timer=_kb_timer)
        op2 = second.ops[0]
        assert op2.improved and op2.pr.action == "updated" and op2.pr.number == pull["number"]
        assert len(fake.open_pulls()) == 1 and len(fake.pulls) == 1
        assert ("PATCH", f"/repos/{REPO}/pulls/{pull['number']}") in fake.calls
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


def test_publish_targets_the_pr_head_branch_and_finds_prs_by_marker(checkout, tmp_path):
    work, remote = checkout
    git(work, "push", "origin", "main:feature/faster-norm")
    git(work, "push", "origin", "main:someone/renamed")
    kernel = work / "ops" / "rmsnorm" / "kernel.py"
    with GitHubFake(REPO, remote) as fake:
        client = PyGithubClient.from_token("t", base_url=fake.url)
        request = PublishRequest(
            checkout=work, repo_full_name=REPO, op="rmsnorm", kernel_path=kernel,
            kernel_source=kernel.read_text() + "# tuned\n", base_branch="feature/faster-norm",
            title="t", body=f"{marker_for('rmsnorm')}\nbody", commit_message="atrex: tune")
        opened = publish(request, client)
        assert opened.action == "opened" and fake.pulls[0]["base"]["ref"] == "feature/faster-norm"
        again = publish(request, client)  # same kernel: no new commit, PR updated
        assert again.action == "updated" and again.commit is None and len(fake.pulls) == 1

    with GitHubFake(REPO, remote) as fake:  # an open atrex PR whose branch was renamed
        fake.add_pull("someone/renamed", "main", "old", f"{marker_for('rmsnorm')}\nold body")
        client = PyGithubClient.from_token("t", base_url=fake.url)
        found = publish(request, client)
        assert found.action == "updated" and found.branch == "someone/renamed"
        assert len(fake.pulls) == 1
        assert _branch_file(remote, "someone/renamed").endswith("# tuned\n")
