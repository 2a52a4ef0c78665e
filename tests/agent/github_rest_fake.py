"""A minimal GitHub REST fake on loopback: just the endpoints the agent's PR path uses through
PyGithub (repo, list/create/get/edit pulls). Head branches are checked against a real bare git
remote, as GitHub refuses a PR from a branch that was never pushed. (tests/bot has a fuller fake;
the two should be unified.)"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse


class GitHubFake:
    def __init__(self, full_name: str, remote: Path, default_branch: str = "main"):
        self.full_name, self.remote, self.default_branch = full_name, Path(remote), default_branch
        self.pulls: list[dict] = []
        self.calls: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address
        return f"http://{host}:{port}"

    def __enter__(self) -> GitHubFake:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def open_pulls(self) -> list[dict]:
        return [p for p in self.pulls if p["state"] == "open"]

    def add_pull(self, head: str, base: str, title: str, body: str) -> dict:
        number = len(self.pulls) + 1
        owner = self.full_name.split("/")[0]
        pull = {"number": number, "state": "open", "title": title, "body": body,
                "html_url": f"https://github.example/{self.full_name}/pull/{number}",
                "url": f"{self.url}/repos/{self.full_name}/pulls/{number}",
                "head": {"ref": head, "label": f"{owner}:{head}", "sha": self._sha(head)},
                "base": {"ref": base, "label": f"{owner}:{base}"}}
        self.pulls.append(pull)
        return pull

    def _sha(self, branch: str) -> str | None:
        proc = subprocess.run(["git", "rev-parse", "--verify", f"refs/heads/{branch}"],
                              cwd=self.remote, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def _repo_json(self) -> dict:
        owner, name = self.full_name.split("/")
        return {"id": 1, "name": name, "full_name": self.full_name, "owner": {"login": owner},
                "default_branch": self.default_branch, "private": False,
                "url": f"{self.url}/repos/{self.full_name}"}

    # -- routing -------------------------------------------------------------------------------
    def route(self, method: str, path: str, query: dict, body: dict) -> tuple[int, object]:
        self.calls.append((method, path))
        prefix = f"/repos/{self.full_name}"
        if path == prefix and method == "GET":
            return 200, self._repo_json()
        if path == prefix + "/pulls" and method == "GET":
            return 200, self._list(query)
        if path == prefix + "/pulls" and method == "POST":
            return self._create(body)
        match = re.fullmatch(re.escape(prefix) + r"/pulls/(\d+)", path)
        if match:
            pull = next((p for p in self.pulls if p["number"] == int(match.group(1))), None)
            if pull is None:
                return 404, {"message": "Not Found"}
            if method == "PATCH":
                return self._edit(pull, body)
            return 200, pull
        return 404, {"message": f"Not Found: {method} {path}"}

    def _list(self, query: dict) -> list[dict]:
        state = query.get("state", ["open"])[0]
        head = query.get("head", [None])[0]
        pulls = [p for p in self.pulls if state == "all" or p["state"] == state]
        if head:
            pulls = [p for p in pulls if p["head"]["label"] == head]
        return pulls

    def _create(self, body: dict) -> tuple[int, object]:
        head, base = body.get("head"), body.get("base")
        if self._sha(head) is None:
            return 422, {"message": "Validation Failed", "errors": [{"field": "head"}]}
        if any(p["head"]["ref"] == head for p in self.open_pulls()):
            return 422, {"message": f"A pull request already exists for {head}"}
        return 201, self.add_pull(head, base, body.get("title", ""), body.get("body", ""))

    def _edit(self, pull: dict, body: dict) -> tuple[int, object]:
        for key in ("title", "body", "state"):
            if key in body:
                pull[key] = body[key]
        if "base" in body:
            pull["base"]["ref"] = body["base"]
        pull["head"]["sha"] = self._sha(pull["head"]["ref"])
        return 200, pull

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _dispatch(self, method: str) -> None:
                url = urlparse(self.path)
                path = url.path.removeprefix("/api/v3")
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {}
                status, payload = fake.route(method, path, parse_qs(url.query), body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                self._dispatch("GET")

            def do_POST(self):  # noqa: N802
                self._dispatch("POST")

            def do_PATCH(self):  # noqa: N802
                self._dispatch("PATCH")

            def log_message(self, *args):
                pass

        return Handler
