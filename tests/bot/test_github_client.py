"""The real PyGithub client (bot.github) against the GitHub fake over loopback HTTP."""

import datetime as dt

import pytest
from atrex.bot.github import GitHubApp, TokenCache
from github import GithubException

from .world import KernelRepo


@pytest.fixture
def repo(fake, tmp_path):
    kernels = KernelRepo(tmp_path, "kernels")
    kernels.branch("tune")
    kernels.touch_kernel("tune")
    kernels.push("tune")
    fake.add_repo("octo/kernels", str(kernels.remote), installation_id=1)
    fake.add_pull("octo/kernels", 5, "tune", author="alice")
    return kernels


def test_token_cache_refreshes_before_expiry():
    now = [0.0]
    minted = []

    def mint(installation_id):
        minted.append(installation_id)
        expires = dt.datetime.fromtimestamp(now[0] + 3600, dt.UTC)
        return f"token-{len(minted)}", expires

    cache = TokenCache(mint, margin_s=300, clock=lambda: now[0])
    assert cache.token(1) == "token-1" and cache.token(1) == "token-1"
    now[0] = 3600 - 301
    assert cache.token(1) == "token-1"
    now[0] = 3600 - 299  # within five minutes of expiry: a new token
    assert cache.token(1) == "token-2"
    assert cache.token(2) == "token-3"


def test_app_auth_installation_token_and_calls(fake, config, repo):
    app = GitHubApp(config)
    api = app.repo(1, "octo/kernels")
    pull = api.pull(5)
    assert pull.head_ref == "tune" and pull.head_sha == fake.sha("octo/kernels", "tune")
    assert pull.base_clone_url == fake.git.url("octo/kernels") and not pull.fork
    assert pull.author == "alice"
    assert app.bot_login() == "atrex-test[bot]"
    fake.set_permission("octo/kernels", "alice", "maintain")
    assert api.permission("alice") == "write" and api.permission("mallory") == "none"
    # one token minted with the App's JWT, reused for every call
    assert len(fake.requests("POST", "access_tokens")) == 1


def test_expired_token_is_replaced(fake, config, repo):
    fake.token_ttl = dt.timedelta(seconds=200)  # shorter than the refresh margin
    api = GitHubApp(config).repo(1, "octo/kernels")
    api.pull(5)
    api.pull(5)
    assert len(fake.requests("POST", "access_tokens")) == 2


def test_check_runs_and_comments(fake, config, repo):
    api = GitHubApp(config).repo(1, "octo/kernels")
    sha = fake.sha("octo/kernels", "tune")
    run_id = api.create_check_run(sha, "atrex", "atrex-job-1", {"title": "Queued",
                                                               "summary": "waiting"})
    assert api.find_check_run(sha, "atrex", "atrex-job-1") == run_id
    assert api.find_check_run(sha, "atrex", "atrex-job-2") is None
    api.update_check_run(run_id, status="completed", conclusion="success",
                         output={"title": "ok", "summary": "fine"})
    assert api.check_run(run_id) == {"status": "completed", "conclusion": "success",
                                      "title": "ok", "html_url": fake.state.check_runs[
                                          run_id]["html_url"]}
    fake.add_comment("octo/kernels", 5, "alice", "<!-- m --> not the bot's")
    assert api.find_comment(5, "<!-- m -->") is None
    comment_id = api.create_comment(5, "<!-- m -->\nhello", "<!-- m -->")
    assert api.find_comment(5, "<!-- m -->") == comment_id
    assert api.edit_comment(5, comment_id, "<!-- m -->\nedited")
    assert fake.state.comments[comment_id]["body"].endswith("edited")
    api.react(5, comment_id, "eyes")
    api.react(5, comment_id, "eyes")
    assert fake.reactions_on(comment_id) == ["eyes"]
    del fake.state.comments[comment_id]
    assert not api.edit_comment(5, comment_id, "gone")


def test_many_comments_are_paginated(fake, config, repo):
    for i in range(70):
        fake.add_comment("octo/kernels", 5, "alice", f"comment {i}")
    api = GitHubApp(config).repo(1, "octo/kernels")
    comment_id = api.create_comment(5, "<!-- late -->", "<!-- late -->")
    assert api.find_comment(5, "<!-- late -->") == comment_id


def test_502_then_success_is_retried(fake, config, repo):
    fake.inject("GET", r"/pulls/5$", 502, times=2)
    assert GitHubApp(config).repo(1, "octo/kernels").pull(5).number == 5
    assert [s for _, _, s in fake.requests("GET", r"/pulls/5$")] == [502, 502, 200]


def test_secondary_rate_limit_with_retry_after_is_retried(fake, config, repo):
    fake.inject_secondary_rate_limit("POST", r"/issues/5/comments$", retry_after=1)
    api = GitHubApp(config).repo(1, "octo/kernels")
    comment_id = api.create_comment(5, "<!-- x -->", "<!-- x -->")
    assert [s for _, _, s in fake.requests("POST", r"/issues/5/comments$")] == [403, 201]
    assert len(fake.comments_on("octo/kernels", 5)) == 1 and comment_id


def test_secondary_rate_limit_without_retry_after_waits_and_retries(fake, config, repo):
    fake.inject("GET", r"/pulls/5$", 403, message="You have exceeded a secondary rate limit.")
    assert GitHubApp(config).repo(1, "octo/kernels").pull(5).number == 5


def test_a_post_answered_502_after_it_was_applied_is_not_repeated(fake, config, repo):
    sha = fake.sha("octo/kernels", "tune")
    fake.inject("POST", r"/check-runs$", 502, apply=True)
    fake.inject("POST", r"/issues/5/comments$", 502, apply=True)
    api = GitHubApp(config).repo(1, "octo/kernels")
    run_id = api.create_check_run(sha, "atrex", "atrex-job-9", {"title": "t", "summary": "s"})
    comment_id = api.create_comment(5, "<!-- once -->", "<!-- once -->")
    assert [r["id"] for r in fake.runs_for("octo/kernels", sha)] == [run_id]
    assert [c["id"] for c in fake.comments_on("octo/kernels", 5)] == [comment_id]


def test_a_post_answered_502_before_it_was_applied_is_created_once(fake, config, repo):
    sha = fake.sha("octo/kernels", "tune")
    fake.inject("POST", r"/check-runs$", 502)
    api = GitHubApp(config).repo(1, "octo/kernels")
    run_id = api.create_check_run(sha, "atrex", "atrex-job-9", {"title": "t", "summary": "s"})
    assert [r["id"] for r in fake.runs_for("octo/kernels", sha)] == [run_id]


def test_client_errors_are_not_retried(fake, config, repo):
    fake.inject("GET", r"/pulls/5$", 404, message="Not Found", times=5)
    with pytest.raises(GithubException):
        GitHubApp(config).repo(1, "octo/kernels").pull(5)
    assert len(fake.requests("GET", r"/pulls/5$")) == 1


def test_wrong_app_key_is_refused(fake, config, repo, tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = tmp_path / "other.pem"
    other.write_bytes(rsa.generate_private_key(public_exponent=65537, key_size=2048)
                      .private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption()))
    with pytest.raises(GithubException) as info:
        GitHubApp(config.with_(private_key_path=other)).repo(1, "octo/kernels").pull(5)
    assert info.value.status == 401


def test_token_minting_is_retried_on_5xx(fake, config, repo):
    fake.inject("POST", r"/access_tokens$", 502)
    assert GitHubApp(config).repo(1, "octo/kernels").pull(5).number == 5
    assert [s for _, _, s in fake.requests("POST", "access_tokens")] == [502, 201]


def test_the_fake_measures_githubs_text_limits_in_bytes(fake, config, repo):
    api = GitHubApp(config).repo(1, "octo/kernels")
    sha = fake.sha("octo/kernels", "tune")
    run_id = api.create_check_run(sha, "atrex", "atrex-job-1", {"title": "t", "summary": "s"})
    for key in ("summary", "text"):
        output = {"title": "t", "summary": "s", key: "✅" * 21846}  # 21,846 chars, 65,538 bytes
        with pytest.raises(GithubException) as refused:
            api.update_check_run(run_id, output=output)
        assert refused.value.status == 422 and "65538 were supplied" in str(refused.value.data)
    api.update_check_run(run_id, output={"title": "t", "summary": "✅" * 21845})  # 65,535 bytes
    assert fake.state.check_runs[run_id]["output"]["summary"] == "✅" * 21845

    marker = "<!-- m -->"
    too_long = marker + "é" * 32764  # 32,774 characters, 65,538 bytes
    with pytest.raises(GithubException) as refused:
        api.create_comment(5, too_long, marker)
    assert refused.value.status == 422 and "body is too long" in str(refused.value.data)
    comment_id = api.create_comment(5, marker + "é" * 32763, marker)  # 65,536 bytes
    with pytest.raises(GithubException) as refused:
        api.edit_comment(5, comment_id, too_long)
    assert refused.value.status == 422
