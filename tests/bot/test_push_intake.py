"""`push` intake: the default branch's new tip becomes one evaluate_branch job (GitHub's published
push example, signed, through the real app)."""

from __future__ import annotations

import json

from atrex.bot.app import create_app
from atrex.bot.config import load_config

from .conftest import SECRET
from .world import payload, sign

SHA = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"


def post(client, event, data, delivery="d1"):
    body = json.dumps(data).encode()
    return client.post("/webhook", data=body, headers={
        "X-GitHub-Event": event, "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(SECRET, body)})


def app_for(tmp_path, **env):
    config = load_config(env={"ATREX_WEBHOOK_SECRET": SECRET,
                              "ATREX_DATA_DIR": str(tmp_path), **env})
    app = create_app(config)
    return app.test_client(), app.extensions["atrex"].store


def test_a_push_to_the_default_branch_records_one_branch_job(tmp_path):
    client, store = app_for(tmp_path)
    data = payload("push")
    response = post(client, "push", data)
    assert response.status_code == 202, response.json
    [job] = store.list()
    assert job.kind == "evaluate_branch" and job.queue == "gpu"
    assert job.payload == {"repo": "Codertocat/Hello-World", "installation_id": 1,
                           "branch": "master", "sha": SHA, "reason": "push"}
    assert post(client, "push", data, delivery="again").json["jobs"] == [
        {"id": job.id, "new": False}]
    deleted = {**data, "deleted": True, "after": "0" * 40}
    assert post(client, "push", deleted, delivery="d").json["note"] == "branch deleted"
    assert post(client, "push", payload("push.tag"), delivery="t").json["jobs"] == []
    malformed = post(client, "push", {**data, "after": "nope"}, delivery="m")
    assert malformed.status_code == 400 and "after is not a commit SHA" in malformed.json["error"]
    assert len(store.list()) == 1


def test_pushes_are_ignored_when_turned_off(tmp_path):
    client, store = app_for(tmp_path, ATREX_HISTORY_PUSH="false")
    response = post(client, "push", payload("push"))
    assert response.status_code == 202 and response.json["jobs"] == []
    assert "ATREX_HISTORY_PUSH=false" in response.json["note"] and store.list() == []
