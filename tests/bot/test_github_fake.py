"""The GitHub fake is as strict as GitHub: tokens, permissions, check runs, comments, git (HTTPS).

Requests go over real HTTP to the fake on loopback: raw `requests` where a test needs an exact
status and body, the bot's own PyGithub client (`atrex.bot.github`) and its git checkout where the
point is what the bot does against it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import requests
from atrex.bot.github import GitHubApp
from atrex.bot.gitwork import FetchError, checkout_pr
from github import GithubException

from .github_rules import COMMENT_BODY_BYTES, OUTPUT_TEXT_BYTES
from .world import KernelRepo, git

REPO = "octo/kernels"


@pytest.fixture
def kernels(fake, tmp_path):
    (tmp_path / "git").mkdir()
    repo = KernelRepo(tmp_path / "git", "kernels")
    fake.add_repo(REPO, str(repo.remote), installation_id=1)
    repo.branch("tune")
    repo.touch_kernel("tuned")
    repo.push("tune")
    fake.add_pull(REPO, 1, "tune", author="alice")
    return repo


def api(fake, method: str, path: str, token: str | None = None, **kwargs) -> requests.Response:
    headers = {"Authorization": f"token {token}"} if token else {}
    return requests.request(method, fake.api_url + path, headers=headers, timeout=10, **kwargs)


def violations(fake) -> list[str]:
    """The OpenAPI problems recorded so far, cleared (tests here send bad requests on purpose)."""
    with fake.lock:
        found = list(fake.state.violations)
        fake.state.violations.clear()
    return found


# --- installations and tokens ------------------------------------------------------------------

def test_tokens_only_for_existing_installations_with_their_permissions(fake, config, kernels):
    app = GitHubApp(config)
    with pytest.raises(GithubException) as unknown:
        app.repo(999, REPO).pull(1)
    assert unknown.value.status == 404
    fake.add_installation(7, "suspended-org", suspended=True)
    with pytest.raises(GithubException) as suspended:
        app.tokens.token(7)
    assert suspended.value.status == 403
    assert app.repo(1, REPO).pull(1).number == 1  # the real installation works

    jwt_header = {"Authorization": f"Bearer {app._integration.auth.token}"}
    more = requests.post(f"{fake.api_url}/app/installations/1/access_tokens", timeout=10,
                         headers=jwt_header, json={"permissions": {"administration": "write"}})
    assert more.status_code == 422 and "not granted" in more.json()["message"]
    scoped = requests.post(f"{fake.api_url}/app/installations/1/access_tokens", timeout=10,
                           headers=jwt_header, json={"permissions": {"checks": "read"},
                                                     "repositories": ["kernels"]})
    assert scoped.status_code == 201 and scoped.json()["permissions"] == {"checks": "read"}
    token = scoped.json()["token"]
    assert api(fake, "GET", f"/repos/{REPO}/pulls/1", token).status_code == 403
    assert api(fake, "GET", f"/repos/{REPO}/commits/{fake.sha(REPO, 'tune')}/check-runs",
               token).status_code == 200
    assert violations(fake) == []


def test_a_permission_the_installation_lacks_is_403(fake, config, kernels):
    fake.set_installation_permissions(1, checks="read", issues="none", pull_requests="read")
    api_ = GitHubApp(config).repo(1, REPO)
    sha = fake.sha(REPO, "tune")
    with pytest.raises(GithubException) as checks:
        api_.create_check_run(sha, "atrex", "atrex-job-1", {"title": "t", "summary": "s"})
    assert checks.value.status == 403
    assert checks.value.data["message"] == "Resource not accessible by integration"
    with pytest.raises(GithubException) as comment:
        api_.create_comment(1, "hello", "<!-- m -->")
    assert comment.value.status == 403
    assert api_.pull(1).number == 1 and api_.find_check_run(sha, "atrex", "x") is None
    assert fake.runs_for(REPO) == [] and fake.comments_on(REPO, 1) == []


def test_repositories_of_another_installation_are_404(fake, kernels):
    fake.add_installation(2, "other")
    token = fake.installation_token(2)
    assert api(fake, "GET", f"/repos/{REPO}", token).status_code == 404
    assert api(fake, "GET", f"/repos/{REPO}", "ghs_not_a_token").status_code == 401


# --- check runs --------------------------------------------------------------------------------

def test_check_runs_only_for_commits_of_the_repository(fake, kernels, tmp_path):
    token = fake.installation_token(1)
    run = {"name": "atrex", "status": "queued"}
    missing = api(fake, "POST", f"/repos/{REPO}/check-runs", token,
                  json={**run, "head_sha": "f" * 40})
    assert missing.status_code == 422 and "No commit found for SHA" in missing.json()["message"]
    assert api(fake, "GET", f"/repos/{REPO}/commits/{'f' * 40}/check-runs",
               token).status_code == 422
    # a fork PR's head commit lives in the fork; GitHub accepts it on the base repository
    fork = kernels.fork(tmp_path, "fork")
    kernels.branch("from-fork")
    fork_sha = kernels.touch_kernel("fork")
    kernels.push("from-fork", remote="fork")
    assert api(fake, "POST", f"/repos/{REPO}/check-runs", token,
               json={**run, "head_sha": fork_sha}).status_code == 422
    fake.add_repo("contributor/kernels", str(fork), installation_id=1)
    fake.add_pull(REPO, 2, "from-fork", head_repo="contributor/kernels")
    assert api(fake, "POST", f"/repos/{REPO}/check-runs", token,
               json={**run, "head_sha": fork_sha}).status_code == 201
    assert violations(fake) == []


def test_check_run_status_conclusion_and_output_rules(fake, kernels):
    token = fake.installation_token(1)
    sha = fake.sha(REPO, "tune")
    created = api(fake, "POST", f"/repos/{REPO}/check-runs", token,
                  json={"name": "atrex", "head_sha": sha})
    assert created.status_code == 201 and created.json()["status"] == "queued"
    path = f"/repos/{REPO}/check-runs/{created.json()['id']}"
    refused = {
        "no conclusion": {"status": "completed"},
        "stale": {"conclusion": "stale"},
        "actions only": {"status": "waiting"},
        "no summary": {"output": {"title": "t"}},
        "summary bytes": {"output": {"title": "t", "summary": "€" * 21846}},  # 65,538 bytes
        "text bytes": {"output": {"title": "t", "summary": "s",
                                  "text": "x" * (OUTPUT_TEXT_BYTES + 1)}},
    }
    for what, body in refused.items():
        answer = api(fake, "PATCH", path, token, json=body)
        assert answer.status_code == 422, (what, answer.text)
    violations(fake)  # several are outside the published schema too (enums)
    fits = api(fake, "PATCH", path, token, json={
        "conclusion": "action_required",
        "output": {"title": "t", "summary": "€" * 21845}})  # 65,535 bytes
    assert fits.status_code == 200 and fits.json()["status"] == "completed"
    assert violations(fake) == []


def test_annotations_at_most_50_with_known_levels(fake, kernels):
    token = fake.installation_token(1)
    sha = fake.sha(REPO, "tune")

    def note(level: str = "warning", **extra) -> dict:
        return {"path": "ops/rmsnorm/kernel.py", "start_line": 3, "end_line": 3,
                "annotation_level": level, "message": "slow", **extra}

    def create(annotations: list[dict]) -> requests.Response:
        return api(fake, "POST", f"/repos/{REPO}/check-runs", token, json={
            "name": "atrex", "head_sha": sha,
            "output": {"title": "t", "summary": "s", "annotations": annotations}})

    accepted = create([note() for _ in range(50)])
    assert accepted.status_code == 201
    assert accepted.json()["output"]["annotations_count"] == 50
    assert create([note() for _ in range(51)]).status_code == 422
    assert create([note("error")]).status_code == 422
    if fake.spec is not None:  # GitHub's published schema, where it is on the machine, too
        assert any("annotation_level" in v for v in violations(fake))
    assert create([{**note(), "end_line": 4, "start_column": 1}]).status_code == 422
    assert create([{k: v for k, v in note().items() if k != "message"}]).status_code == 422
    violations(fake)


# --- comments ----------------------------------------------------------------------------------

def test_comment_bodies_are_not_blank_and_fit_in_bytes(fake, kernels):
    token = fake.installation_token(1)
    comments = f"/repos/{REPO}/issues/1/comments"
    for body in ("", "   \n", None):
        answer = api(fake, "POST", comments, token, json={"body": body})
        assert answer.status_code == 422, body
    too_long = "é" * (COMMENT_BODY_BYTES // 2 + 1)  # 32,769 characters, 65,538 bytes
    assert api(fake, "POST", comments, token, json={"body": too_long}).status_code == 422
    created = api(fake, "POST", comments, token, json={"body": "é" * (COMMENT_BODY_BYTES // 2)})
    assert created.status_code == 201
    path = f"/repos/{REPO}/issues/comments/{created.json()['id']}"
    assert api(fake, "PATCH", path, token, json={"body": ""}).status_code == 422
    assert api(fake, "PATCH", path, token, json={"body": too_long}).status_code == 422
    assert api(fake, "PATCH", path, token, json={"body": "short"}).status_code == 200
    assert fake.state.comments[created.json()["id"]]["_edits"] == 1
    violations(fake)


# --- git over HTTPS ----------------------------------------------------------------------------

def _git_env(fake, token: str | None) -> dict[str, str]:
    import base64
    import os

    env = {**os.environ, "GIT_SSL_CAINFO": fake.ca_file, "GIT_TERMINAL_PROMPT": "0"}
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="http.extraHeader",
                   GIT_CONFIG_VALUE_0=f"Authorization: Basic {basic}")
    return env


def _ls_remote(fake, url: str, token: str | None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "ls-remote", url, "refs/heads/main"], capture_output=True,
                          text=True, env=_git_env(fake, token), timeout=60)


def test_git_over_https_needs_the_installation_token(fake, kernels, tmp_path):
    url = fake.git.url(REPO)
    assert fake.state.repos[REPO].private
    assert _ls_remote(fake, url, None).returncode != 0
    assert _ls_remote(fake, url, "ghs_wrong").returncode != 0
    fake.add_installation(2, "other")
    assert _ls_remote(fake, url, fake.installation_token(2)).returncode != 0
    token = fake.installation_token(1)
    listed = _ls_remote(fake, url, token)
    assert listed.returncode == 0 and fake.sha(REPO, "main") in listed.stdout
    assert [s for _, _, s, _ in fake.git_requests(REPO)][:4] == [401, 401, 404, 200]

    # pushing needs contents: write
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", url, str(clone)], check=True,
                   env=_git_env(fake, token), timeout=60)
    git(clone, "commit", "--allow-empty", "-m", "pushed over https")
    fake.set_installation_permissions(1, contents="read")
    reader = fake.installation_token(1)
    refused = subprocess.run(["git", "push", "-q", "origin", "HEAD:refs/heads/pushed"],
                             cwd=clone, capture_output=True, text=True,
                             env=_git_env(fake, reader), timeout=60)
    assert refused.returncode != 0 and fake.branch_sha(REPO, "pushed") is None
    pushed = subprocess.run(["git", "push", "-q", "origin", "HEAD:refs/heads/pushed"],
                            cwd=clone, capture_output=True, text=True,
                            env=_git_env(fake, token), timeout=60)
    assert pushed.returncode == 0, pushed.stderr
    assert fake.branch_sha(REPO, "pushed") == git(clone, "rev-parse", "HEAD")


def test_the_bot_fetches_with_the_token_it_minted(fake, config, kernels, tmp_path):
    app = GitHubApp(config)
    pull = app.repo(1, REPO).pull(1)
    assert pull.head_clone_url == fake.git.url(REPO)
    checkout = checkout_pr(Path(config.data_dir), tmp_path / "work", REPO, 1, pull.head_sha,
                           pull.head_clone_url, pull.head_ref, pull.base_clone_url,
                           pull.base_ref, app.tokens.token(1))
    assert (checkout.head_dir / "ops" / "rmsnorm" / "kernel.py").is_file()
    fetches = fake.git_requests(REPO)
    assert fetches and all(status == 200 for _, _, status, _ in fetches)
    minted = {t for t in (token for _, _, _, token in fetches)}
    assert len(minted) == 1 and fake.state.tokens[minted.pop()].installation_id == 1
    assert len(fake.requests("POST", "access_tokens")) == 1
    with pytest.raises(FetchError):
        checkout_pr(Path(config.data_dir), tmp_path / "again", REPO, 1, pull.head_sha,
                    pull.head_clone_url, pull.head_ref, pull.base_clone_url, pull.base_ref,
                    None)
