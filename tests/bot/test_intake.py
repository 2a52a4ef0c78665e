"""Intake through the real server (`python -m atrex.bot serve`, gunicorn), real signed deliveries:

- hostile bodies and fields are answered 4xx with what is wrong, never 500, and record nothing;
- installed repositories are recorded in the delivery's own transaction, as one batch: 50,000 of
  them in one delivery, and a kill -9 at any moment leaves all of them or none;
- slow clients (connections trickling bytes) do not hold the server's threads.

No worker runs: these are the web process's answers and what it recorded.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
from atrex.bot.store import SqlStore

from .conftest import SECRET, process_env
from .world import BotServer, deliver, payload, pr_payload, sign, wait_for

pytestmark = pytest.mark.slow
READ_TIMEOUT_S = 2


class Intake:
    def __init__(self, base: Path, read_timeout_s: float = READ_TIMEOUT_S):
        self.base = base
        env = process_env({"ATREX_WEBHOOK_SECRET": SECRET, "ATREX_DATA_DIR": str(base / "data"),
                           "ATREX_WEB_WORKERS": "1", "ATREX_WEB_THREADS": "4",
                           "ATREX_WEB_READ_TIMEOUT_S": str(read_timeout_s)})
        self.server = BotServer(env, base / "server.log")
        self._store: SqlStore | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def store(self) -> SqlStore:
        if self._store is None:
            self._store = SqlStore(f"sqlite:///{self.base / 'data' / 'atrex-bot.db'}")
        return self._store

    def close(self) -> None:
        self.server.stop()
        if self._store is not None:
            self._store.close()


@pytest.fixture(scope="module")
def intake(tmp_path_factory):
    world = Intake(tmp_path_factory.mktemp("intake"))
    world.server.start()
    yield world
    world.close()


def nested(depth: int) -> bytes:
    return b'{"a": ' * depth + b"1" + b"}" * depth


def rerequest(external_id: str, head_sha: str = "a" * 40) -> dict:
    data = payload("check_run.rerequested")
    data["installation"] = {"id": 1}
    data["check_run"].update(external_id=external_id, head_sha=head_sha)
    data["check_run"]["app"]["id"] = 4242
    return data


def pr(**changes) -> dict:
    data = pr_payload("opened", "octo/k", 1, "c" * 40, "tune")
    for dotted, value in changes.items():
        target = data
        *keys, last = dotted.split("__")
        for key in keys:
            target = target[key]
        target[last] = value
    return data


def comment(**fields) -> dict:
    data = payload("issue_comment.created")
    data["installation"] = {"id": 1}
    data["issue"]["pull_request"] = {"url": "https://example.invalid/pulls/1"}
    data["comment"].update({"body": "/atrex help", **fields})
    return data


def installation_with(repos: list) -> dict:
    data = payload("installation.created")
    data["repositories"] = repos
    return data


HOSTILE = [  # (what, event, body, what the 400 says)
    ("100,000 nested arrays", "pull_request", b"[" * 100_000, "nests deeper than 32"),
    ("40 nested objects", "pull_request", nested(40), "nests deeper than 32"),
    ("a 5,000-digit number", "ping", b'{"zen": ' + b"9" * 5000 + b"}", "not JSON"),
    ("not UTF-8", "ping", b'{"zen": "\xff\xfe"}', "not JSON"),
    ("a JSON array", "ping", b"[1, 2]", "not a JSON object"),
    ("a job id past 64 bits", "check_run", rerequest("atrex-job-99999999999999999999"),
     "names no possible job"),
    ("a job id of 5,000 digits", "check_run", rerequest("atrex-job-" + "9" * 5000),
     "names no possible job"),
    ("a check run's head SHA that is no SHA", "check_run",
     rerequest("atrex-job-1", head_sha="main; rm -rf /"), "check_run.head_sha is not a commit"),
    ("a PR number past 64 bits", "pull_request", pr(pull_request__number=2**63),
     "pull_request.number is not an id"),
    ("a negative installation id", "pull_request", pr(installation__id=-1),
     "installation.id is not an id"),
    ("a boolean installation id", "pull_request", pr(installation__id=True), "wrong type"),
    ("a 300-character repository name", "pull_request",
     pr(repository__full_name="octo/" + "k" * 300), "not a repository full name"),
    ("a head SHA in upper case", "pull_request", pr(pull_request__head__sha="C" * 40),
     "not a commit SHA"),
    ("a lone surrogate as a login", "issue_comment",
     comment(user={"login": "\ud800", "type": "User"}), "not a GitHub login"),
    ("a float comment id", "issue_comment", comment(id=1e20), "wrong type"),
    ("a repository without a name in an installation", "installation",
     installation_with([{"full_name": "octo/one"}, {"full_name": 5}]), "wrong type"),
]


@pytest.mark.parametrize("what,event,body,says", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_are_answered_400_and_record_nothing(intake, what, event, body, says):
    before = intake.store.counts()
    response = deliver(intake.url, event, body, SECRET)
    assert response.status_code == 400, (what, response.status_code, response.text[:500])
    assert says in response.json()["error"], response.json()
    assert intake.store.counts() == before
    assert intake.store.installed_repos() == {}


def test_malformed_headers_are_answered_400(intake):
    body = json.dumps(payload("ping")).encode()
    for delivery in ("has spaces", "x" * 129, "ünïcode"):
        assert deliver(intake.url, "ping", body, SECRET, delivery_id=delivery).status_code == 400
    assert deliver(intake.url, "x" * 65, body, SECRET).status_code == 400
    assert deliver(intake.url, "ping", body, SECRET).status_code == 200


def raw_request(url: str, head: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        return sock.recv(4096)


def test_sizes_are_bounded_before_the_body_is_read(intake):
    too_big = (b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 26214401\r\n"
               b"X-GitHub-Event: ping\r\n\r\n")
    assert raw_request(intake.url, too_big).startswith(b"HTTP/1.1 413 ")
    chunked = b"POST /webhook HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert raw_request(intake.url, chunked).startswith(b"HTTP/1.1 411 ")
    huge_header = b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n"
    assert raw_request(intake.url, huge_header).startswith(b"HTTP/1.1 431 ")


def test_expect_100_continue_and_pipelined_requests(intake):
    host, port = intake.url.removeprefix("http://").split(":")
    body = json.dumps(payload("ping")).encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                     b"X-GitHub-Event: ping\r\nX-GitHub-Delivery: e1\r\n"
                     b"X-Hub-Signature-256: " + sign(SECRET, body).encode() +
                     b"\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = b""
        # both answers whole: a response's body can arrive in a later segment than its head
        while not (b'"pong":true' in answers and b'"status":"ok"' in answers):
            chunk = sock.recv(4096)
            assert chunk, answers
            answers += chunk
    assert answers.count(b"HTTP/1.1 200") == 2


def test_a_store_that_cannot_be_written_answers_503_not_500(tmp_path):
    """In-process (the server's app): the database file replaced by a directory."""
    from atrex.bot.app import create_app
    from atrex.bot.config import BotConfig

    app = create_app(BotConfig(webhook_secret=SECRET, data_dir=tmp_path))
    store = app.extensions["atrex"].store
    store.engine.dispose()
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"atrex-bot.db{suffix}").unlink(missing_ok=True)
    (tmp_path / "atrex-bot.db").mkdir()
    body = json.dumps(pr()).encode()
    response = app.test_client().post("/webhook", data=body, headers={
        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d1",
        "X-Hub-Signature-256": sign(SECRET, body)})
    assert response.status_code == 503 and response.headers["Retry-After"] == "30"
    store.close()


def many_repositories(count: int) -> list[dict]:
    return [{"id": i, "node_id": f"R_{i}", "name": f"kernels-{i}",
             "full_name": f"org{i % 97}/kernels-{i}", "private": False} for i in range(count)]


def test_an_installation_of_50000_repositories_is_recorded_at_once(intake):
    """Measured, not asserted (the machine is shared): the installation's answer, and a PR
    delivery sent while it is being recorded."""
    data = installation_with(many_repositories(50_000))
    data["installation"]["id"] = 50_000
    body = json.dumps(data).encode()
    timings: dict[str, float] = {}
    answers = {}

    def send(name: str, event: str, content: bytes) -> None:
        start = time.perf_counter()
        answers[name] = deliver(intake.url, event, content, SECRET, timeout=60)
        timings[name] = round(time.perf_counter() - start, 3)

    big = threading.Thread(target=send, args=("installation", "installation", body))
    big.start()
    time.sleep(0.05)
    send("pull_request", "pull_request", json.dumps(pr(pull_request__number=77)).encode())
    big.join()
    print(f"\n50,000 repositories ({len(body) / 1e6:.1f} MB): installation answered in "
          f"{timings['installation']} s, a PR delivery sent 0.05 s later in "
          f"{timings['pull_request']} s")
    assert answers["installation"].status_code == 202, answers["installation"].text
    assert answers["pull_request"].status_code == 202, answers["pull_request"].text
    repos = intake.store.installed_repos()
    assert sum(1 for i in repos.values() if i == 50_000) == 50_000
    assert repos[f"org{49_999 % 97}/kernels-49999"] == 50_000


def test_kill9_while_recording_an_installation_leaves_all_or_nothing(tmp_path):
    """The repositories are written in the delivery's transaction: after a kill -9 at any moment
    the delivery is recorded with every repository, or not at all (and GitHub's redelivery then
    records it). The kills are spread over the time one such delivery takes here."""
    world = Intake(tmp_path)
    repos = many_repositories(20_000)
    data = installation_with(repos)
    body = json.dumps(data).encode()
    outcomes = []
    try:
        world.server.start()
        first = installation_with([{**r, "full_name": "x" + r["full_name"]} for r in repos])
        first["installation"]["id"] = 8  # a first one, to measure how long it takes
        start = time.perf_counter()
        assert deliver(world.url, "installation", json.dumps(first).encode(), SECRET,
                       timeout=60).status_code == 202
        took = time.perf_counter() - start
        before = len(world.store.installed_repos())
        delivery = str(uuid.uuid4())
        for fraction in (0.3, 0.6, 0.8, 0.9, 1.0, 1.2):
            sender = threading.Thread(target=_deliver_quietly, args=(world.url, body, delivery))
            sender.start()
            time.sleep(took * fraction)
            world.server.kill9()
            sender.join()
            recorded = world.store.counts()["deliveries"] == 2
            count = len(world.store.installed_repos()) - before
            assert count == (len(repos) if recorded else 0), (fraction, recorded, count)
            outcomes.append((fraction, recorded))
            world.server.start()
        response = deliver(world.url, "installation", body, SECRET, delivery_id=delivery)
        assert response.status_code in (200, 202)
        assert len(world.store.installed_repos()) - before == len(repos)
        print(f"\n20,000 repositories: {took:.2f} s; kill -9 at fractions of that time -> "
              f"delivery recorded: {outcomes}")
    finally:
        world.close()


def _deliver_quietly(url: str, body: bytes, delivery: str) -> None:
    try:
        deliver(url, "installation", body, SECRET, delivery_id=delivery, timeout=30)
    except Exception:  # the server was killed mid-request
        pass


class Trickler:
    """A client that sends a request one byte at a time."""

    def __init__(self, url: str, interval_s: float):
        host, port = url.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        body = b'{"zen": "slow"}' * 10
        self.request = (b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: ping\r\n"
                        b"Content-Length: %d\r\n\r\n" % len(body)) + body
        self.interval_s = interval_s
        self.answer = b""
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            for i in range(len(self.request)):
                if select.select([self.sock], [], [], 0)[0]:  # answered before done
                    break
                self.sock.send(self.request[i:i + 1])
                time.sleep(self.interval_s)
            self.answer = self.sock.recv(4096)
        except OSError:
            pass
        self.sock.close()


def test_slow_clients_do_not_stall_healthz_or_deliveries(intake):
    """20 connections (five times the server's 4 threads) trickle a request a byte every 0.2 s;
    meanwhile /healthz and signed deliveries are answered, and each trickler gets 408 once the
    read deadline passes."""
    import requests

    tricklers = [Trickler(intake.url, 0.2) for _ in range(20)]
    for t in tricklers:
        t.thread.start()
    time.sleep(0.5)  # every trickler is connected and has sent its first bytes
    for _ in range(10):
        assert requests.get(intake.url + "/healthz", timeout=5).status_code == 200
    ping = deliver(intake.url, "ping", payload("ping"), SECRET, timeout=5)
    assert ping.status_code == 200 and ping.json()["pong"] is True
    response = deliver(intake.url, "pull_request", pr(pull_request__number=88), SECRET,
                       timeout=5)
    assert response.status_code == 202, response.text
    assert any(t.thread.is_alive() for t in tricklers)  # still trickling meanwhile
    for t in tricklers:
        t.thread.join(timeout=30)
    assert all(t.answer.startswith(b"HTTP/1.1 408 ") for t in tricklers), \
        [t.answer[:40] for t in tricklers]
    wait_for(lambda: requests.get(intake.url + "/healthz", timeout=5).ok, timeout=10)
