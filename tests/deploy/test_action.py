"""action.yml's steps executed as a runner would, against the GitHub fake and a real git repository.

A pull request changes the rmsnorm kernel of a small kernel repository; the Action evaluates head
against the merge base on the CPU (no timing), writes the job summary, leaves the files the upload
step uploads, posts the App's sticky comment through the fake's REST API with the workflow token,
and passes. A second push makes the kernel wrong: the same comment is edited and the job fails.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from atrex.bot.render import STICKY_MARKER

from tests.bot.conftest import APP_ID
from tests.bot.github_fake import FakeGitHub
from tests.bot.world import KernelRepo, pr_payload

from .actions_runner import ActionRunner, process_env

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
REPO = "octo/kernels"
TOKEN = "ghs_workflowtoken"


@pytest.fixture
def fake():
    github = FakeGitHub(APP_ID, public_key=None).start()
    github.add_installation(1, "octo")
    # a pull_request workflow's GITHUB_TOKEN (permissions as the Action's docs ask for)
    github.grant_token(TOKEN, 1, {"pull_requests": "write", "issues": "write",
                                  "contents": "read", "metadata": "read"})
    yield github
    github.stop()


def atrex_on_path(tmp_path: Path) -> Path:
    """An `atrex` command on PATH, as on a self-hosted runner with atrex installed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "atrex"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m atrex \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def event_for(kernels: KernelRepo, base_sha: str, head_sha: str) -> dict:
    event = pr_payload("synchronize", REPO, 1, head_sha, "tune", clone_url=str(kernels.remote))
    event["pull_request"]["base"]["sha"] = base_sha
    return event


def test_action_steps_summary_artifacts_sticky_comment_and_verdict(tmp_path, fake):
    (tmp_path / "git").mkdir()
    kernels = KernelRepo(tmp_path / "git", "kernels")
    fake.add_repo(REPO, str(kernels.remote))
    base_sha = fake.sha(REPO, "main")
    kernels.branch("tune")
    head_sha = kernels.touch_kernel("tuned")
    kernels.push("tune")
    fake.add_pull(REPO, 1, "tune")

    env = process_env(PATH=f"{atrex_on_path(tmp_path)}:/usr/bin:/bin",
                      PYTHONPATH=str(ROOT), GITHUB_API_URL=fake.api_url)
    runner = ActionRunner(ROOT, kernels.work, tmp_path / "runs", env, "pull_request",
                          event_for(kernels, base_sha, head_sha), REPO, TOKEN)
    inputs = {"path": ".", "regression": "0.05", "gpu-kind": "h200_sxm", "comment": "true",
              "comment-author": fake.bot_login}
    job = runner.run(inputs, run_id=1)
    logs = "\n".join(f"--- {s.name}\n{s.output[-3000:]}" for s in job.steps)

    assert not job.failed, logs
    assert job.step("Install").outputs["atrex"].endswith("/bin/atrex")
    report = job.step("Evaluate")
    assert report.outputs["conclusion"] == "neutral", logs  # no GPU: not timed
    assert report.outputs["ops"] == "rmsnorm" and report.outputs["exit-code"] == "0"
    assert "## atrex · ➖ neutral" in job.summary and "| `rmsnorm` | ✅ pass | 100%" in job.summary

    upload = job.step("Upload")
    assert upload.ran and upload.uses.startswith("actions/upload-artifact@")
    files = {p.name: p for p in (job.artifacts / "atrex-report").iterdir()}
    assert set(files) == {"atrex-report.json", "atrex-comment.md", "atrex-roofline.png",
                          "atrex-pr.txt"}
    result = json.loads(files["atrex-report.json"].read_text())
    assert result["schema"] == "atrex.pr-result/2" and result["head_sha"] == head_sha
    assert result["base_sha"] == base_sha and result["conclusion"] == "neutral"
    assert files["atrex-roofline.png"].read_bytes()[:4] == b"\x89PNG"
    assert files["atrex-pr.txt"].read_text().strip() == "1"

    [comment] = fake.comments_on(REPO, 1)
    assert comment["body"].startswith(STICKY_MARKER) and head_sha[:12] in comment["body"]
    assert comment["body"] == files["atrex-comment.md"].read_text().rstrip("\n")
    assert job.step("Verdict").outcome == "success"

    # a second push breaks the kernel: the same comment is edited, and the job fails
    kernel = kernels.work / "ops" / "rmsnorm" / "kernel.py"
    kernel.write_text(kernel.read_text().replace("out = x * inv_rms * w", "out = x * inv_rms * w"
                                                 " * 2.0"))
    broken = kernels.commit("rmsnorm: twice as fast (and twice as large)")
    kernels.push("tune")
    runner.event = event_for(kernels, base_sha, broken)
    job = runner.run(inputs, run_id=2)
    logs = "\n".join(f"--- {s.name}\n{s.output[-3000:]}" for s in job.steps)
    assert job.step("Evaluate").outputs["conclusion"] == "failure", logs
    assert "❌ failure" in job.summary and "incorrect" in job.summary, logs
    [edited] = fake.comments_on(REPO, 1)
    assert edited["id"] == comment["id"] and edited["_edits"] == 1
    assert broken[:12] in edited["body"] and "wrong results" in edited["body"]
    verdict = job.step("Verdict")
    assert verdict.outcome == "failure" and "::error::atrex: 1 of 1 operator failed" in \
        verdict.output
    assert job.step("Upload").ran  # artifacts are uploaded for a failing run too


def test_comment_mode_posts_only_for_the_evaluated_head(tmp_path, fake):
    """Stage 2 of the fork pattern: the comment from an artifact, never for another commit."""
    (tmp_path / "git").mkdir()
    kernels = KernelRepo(tmp_path / "git", "kernels")
    fake.add_repo(REPO, str(kernels.remote))
    kernels.branch("tune")
    head_sha = kernels.touch_kernel("tuned")
    kernels.push("tune")
    fake.add_pull(REPO, 7, "tune")
    report_dir = kernels.work.parent / "atrex-report"
    report_dir.mkdir()
    result = {"schema": "atrex.pr-result/1", "head_sha": head_sha, "base_sha": "b" * 40,
              "error": None, "removed": [], "threshold": 0.05, "conclusion": "neutral",
              "title": "No operator changed", "head": None, "base": None}
    (report_dir / "atrex-report.json").write_text(json.dumps(result))
    (report_dir / "atrex-pr.txt").write_text("7\n")
    env = process_env(PATH=f"{atrex_on_path(tmp_path)}:/usr/bin:/bin", PYTHONPATH=str(ROOT),
                      GITHUB_API_URL=fake.api_url)
    runner = ActionRunner(ROOT, kernels.work.parent, tmp_path / "runs", env, "workflow_run", {},
                          REPO, TOKEN)
    base = {"mode": "comment", "report-dir": str(report_dir), "comment-author": fake.bot_login}

    job = runner.run({**base, "expect-head-sha": "c" * 40}, run_id=1)
    assert job.failed and "not posting" in job.step("from a report artifact").output
    assert fake.comments_on(REPO, 7) == []

    result.update(conclusion="failure", error="shapes.json: not valid JSON")
    (report_dir / "atrex-report.json").write_text(json.dumps(result))
    job = runner.run({**base, "expect-head-sha": head_sha}, run_id=2)
    assert not job.failed, job.step("from a report artifact").output
    assert not job.step("Evaluate").ran and not job.step("Verdict").ran
    [comment] = fake.comments_on(REPO, 7)
    assert comment["body"].startswith(STICKY_MARKER) and "could not be evaluated" in \
        comment["body"]
