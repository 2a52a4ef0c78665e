"""Webhook intake in-process (Flask's test client): signature, routing, dedupe, installations."""

import json

import pytest
from atrex.bot.app import create_app
from atrex.bot.config import BotConfig, ConfigError
from atrex.bot.handlers import build_router
from atrex.bot.webhook import signature_ok

from .conftest import SECRET
from .world import comment_payload, payload, pr_payload, sign


@pytest.fixture
def client(tmp_path):
    config = BotConfig(webhook_secret=SECRET, data_dir=tmp_path, app_id=4242)
    app = create_app(config)
    return app.test_client(), app.extensions["atrex"].store


def post(client, event, data, delivery="d1", signature=None):
    body = json.dumps(data).encode()
    return client.post("/webhook", data=body, headers={
        "X-GitHub-Event": event, "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": signature or sign(SECRET, body)})


def test_signature_check():
    body = b'{"zen": "x"}'
    good = sign("secret", body)
    assert signature_ok("secret", body, good)
    assert not signature_ok("secret", body + b" ", good)
    assert not signature_ok("other", body, good)
    assert not signature_ok("secret", body, None)
    assert not signature_ok("secret", body, good.upper())
    assert not signature_ok("secret", body, "sha256=\u00e9")


def test_app_needs_the_webhook_secret(tmp_path):
    with pytest.raises(ConfigError, match="ATREX_WEBHOOK_SECRET"):
        create_app(BotConfig(data_dir=tmp_path))


def test_routes_cover_the_handled_events():
    assert build_router().routes() == [
        ("check_run", "rerequested"), ("installation", "created"),
        ("installation", "deleted"), ("installation", "new_permissions_accepted"),
        ("installation", "suspend"), ("installation", "unsuspend"),
        ("installation_repositories", "added"), ("installation_repositories", "removed"),
        ("issue_comment", "created"), ("pull_request", "opened"),
        ("pull_request", "ready_for_review"), ("pull_request", "reopened"),
        ("pull_request", "synchronize"), ("push", None)]


def test_pr_delivery_records_one_evaluation(client):
    client, store = client
    data = pr_payload("synchronize", "octo/k", 3, "c" * 40, "tune", clone_url="/x")
    response = post(client, "pull_request", data)
    assert response.status_code == 202 and response.json["jobs"] == [{"id": 1, "new": True}]
    [job] = store.list()
    assert job.kind == "evaluate" and job.queue == "light" and job.payload == {
        "stage": "announce", "repo": "octo/k", "installation_id": 1, "pr": 3,
        "head_sha": "c" * 40, "fork": False, "reason": "pull_request.synchronize",
        "comment_id": None}
    assert client.get("/healthz").json["jobs"]["queued"] == 1


def test_fork_flag_comes_from_the_payload(client):
    client, store = client
    data = pr_payload("opened", "octo/k", 3, "c" * 40, "tune", head_repo="someone/k")
    post(client, "pull_request", data)
    assert store.list()[0].payload["fork"] is True
    deleted_fork = pr_payload("opened", "octo/k", 4, "d" * 40, "tune")
    deleted_fork["pull_request"]["head"]["repo"] = None
    post(client, "pull_request", deleted_fork, delivery="d2")
    assert store.list()[1].payload["fork"] is True


def test_comments_become_command_jobs(client):
    client, store = client
    comment = {"id": 11, "body": "/atrex approve abc", "user": {"login": "m", "type": "User"},
               "performed_via_github_app": None}
    assert post(client, "issue_comment", comment_payload("octo/k", 3, comment)).status_code == 202
    [job] = store.list()
    assert job.kind == "command" and job.payload["command"] == "approve"
    assert "not a commit SHA" in job.payload["error"]
    own = {**comment, "id": 12, "performed_via_github_app": {"id": 4242}}
    assert post(client, "issue_comment", comment_payload("octo/k", 3, own),
                delivery="d2").json["jobs"] == []
    on_issue = comment_payload("octo/k", 3, {**comment, "id": 13})
    del on_issue["issue"]["pull_request"]
    assert post(client, "issue_comment", on_issue, delivery="d3").json["jobs"] == []


def test_installation_changes_apply_once(client):
    client, store = client
    created = payload("installation.created")
    assert post(client, "installation", created, delivery="i1").status_code == 202
    assert store.installed_repos() == {"Codertocat/Hello-World": created["installation"]["id"]}
    store.remove_repos(created["installation"]["id"])
    assert post(client, "installation", created, delivery="i1").status_code == 200
    assert store.installed_repos() == {}  # a redelivered old event does not re-apply


def test_ping_and_unhandled(client):
    client, _ = client
    assert post(client, "ping", payload("ping")).json["pong"] is True
    assert post(client, "star", {"action": "created"}).json == {"ignored": "star.created"}
    assert client.post("/webhook", data=b"x" * 100).status_code == 401
