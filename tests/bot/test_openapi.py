"""GitHub's published OpenAPI description holds the fake and what the bot sends to it.

Every `FakeGitHub` checks each request it receives and each response it gives against the
description (tests/bot/openapi.py) and fails in `stop()` when anything did not conform, so every
test that runs the bot or the agent against the fake (test_e2e.py, test_agent_e2e.py,
test_worker.py, tests/agent, tests/deploy) is also this schema test. Here: the description is
present (CI fetches it with .ci/github-openapi.sh), the checker is not vacuous, and every endpoint
of the fake answers in GitHub's shapes.
"""

from __future__ import annotations

import json
import os

import pytest
import requests
from atrex.bot.github import GitHubApp

from . import openapi
from .world import KernelRepo

REPO = "octo/kernels"


@pytest.fixture(scope="module")
def spec() -> openapi.OpenApi:
    loaded = openapi.load()
    if loaded is None:
        if os.environ.get("CI"):
            pytest.fail(f"GitHub's OpenAPI description is missing: {openapi.FETCH_HINT}")
        pytest.skip(f"GitHub's OpenAPI description is not on this machine: {openapi.FETCH_HINT}")
    return loaded


def test_the_description_is_the_pinned_one(spec):
    assert spec.version == openapi.SPEC_VERSION
    assert spec.find("POST", "/repos/o/r/check-runs")[0].template == \
        "/repos/{owner}/{repo}/check-runs"
    found = spec.find("GET", "/repos/o/r/contents/ops/rmsnorm/kernel.py")
    assert found[1] == {"owner": "o", "repo": "r", "path": "ops/rmsnorm/kernel.py"}


def test_the_checker_reports_what_github_does_not_document(spec):
    body = {"name": "atrex", "head_sha": "a" * 40, "status": "queued",
            "output": {"title": "t", "summary": "s", "annotations": [
                {"path": "k.py", "start_line": 1, "end_line": 1, "annotation_level": "error",
                 "message": "m"}]}}
    problems = spec.request_problems("POST", "/repos/o/r/check-runs", [],
                                     json.dumps(body).encode())
    assert len(problems) == 1 and "annotation_level" in problems[0]
    assert spec.request_problems("GET", "/repos/o/r/issues/1/comments",
                                 [("per_page", "x"), ("sort", "new")], b"") == [
        "GET /repos/{owner}/{repo}/issues/{issue_number}/comments: parameter per_page='x' is "
        "not integer",
        "GET /repos/{owner}/{repo}/issues/{issue_number}/comments: unknown query parameter "
        "'sort'"]
    assert spec.request_problems("GET", "/repos/o/r/no-such-thing", [], b"")
    missing = spec.response_problems("GET", "/repos/o/r/pulls/1", 200, b'{"id": 1}',
                                     "application/json")
    assert any("'_links' is a required property" in p for p in missing)
    assert spec.response_problems("POST", "/repos/o/r/check-runs", 422,
                                  b'{"message": "x", "documentation_url": "d"}',
                                  "application/json") == []
    assert spec.response_problems("POST", "/repos/o/r/check-runs", 500, b"{}",
                                  "application/json")


def test_every_endpoint_of_the_fake_answers_in_githubs_shapes(spec, fake, config, tmp_path):
    """The calls the bot and the agent make, each once, plus the fake's refusals."""
    assert fake.spec is spec
    kernels = KernelRepo(tmp_path, "kernels")
    fake.add_repo(REPO, str(kernels.remote))
    kernels.branch("tune")
    kernels.touch_kernel("tuned")
    kernels.push("tune")
    kernels.branch("atrex/optimize/rmsnorm")
    kernels.touch_kernel("faster")
    kernels.push("atrex/optimize/rmsnorm")
    fake.add_pull(REPO, 1, "tune", author="alice")
    fake.set_permission(REPO, "alice", "maintain")
    app = GitHubApp(config)
    api = app.repo(1, REPO)
    gh = app.client(1).get_repo(REPO)

    assert app.bot_login() == fake.bot_login and api.default_branch() == "main"
    assert api.pull(1).head_ref == "tune" and api.permission("alice") == "write"
    assert api.permission("nobody") == "none"
    assert "ops_root" in api.file_text("atrex.toml") and api.file_text("missing") is None
    assert gh.get_git_ref("heads/main").object.sha == fake.sha(REPO, "main")
    sha = fake.sha(REPO, "tune")
    run_id = api.create_check_run(sha, "atrex", "atrex-job-1", {"title": "q", "summary": "s"})
    api.update_check_run(run_id, status="in_progress")
    api.update_check_run(run_id, conclusion="success", output={
        "title": "done", "summary": "ok", "annotations": [
            {"path": "ops/rmsnorm/kernel.py", "start_line": 1, "end_line": 1,
             "annotation_level": "notice", "message": "fine"}]})
    assert api.check_run(run_id)["conclusion"] == "success"
    assert api.find_check_run(sha, "atrex", "atrex-job-1") == run_id
    comment = api.create_comment(1, "<!-- m -->\nhello", "<!-- m -->")
    assert api.find_comment(1, "<!-- m -->") == comment and api.edit_comment(1, comment, "x")
    api.react(1, comment, "eyes")
    api.react(1, comment, "eyes")
    gh.get_issue(1).get_comment(comment).delete()
    opened = gh.create_pull(title="rmsnorm: faster", body="b", head="atrex/optimize/rmsnorm",
                            base="tune")
    opened.edit(title="rmsnorm: faster still", body="b2")
    assert [p.number for p in gh.get_pulls(state="open", head="octo:atrex/optimize/rmsnorm")] \
        == [opened.number]
    with pytest.raises(Exception):  # noqa: B017 - GitHub's 422 for a duplicate
        gh.create_pull(title="again", body="b", head="atrex/optimize/rmsnorm", base="tune")
    token = fake.installation_token(1)
    refused = requests.post(f"{fake.api_url}/repos/{REPO}/issues/1/comments", timeout=10,
                            headers={"Authorization": f"token {token}"}, json={"body": " "})
    assert refused.status_code == 422
    fake.assert_conforms()
