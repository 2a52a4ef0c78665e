"""The test world for the bot: kernel git repositories, webhook deliveries, bot processes.

- `KernelRepo`: a bare "remote" git repository holding a small kernel repository (the example
  rmsnorm op), with a working clone to make commits and push branches; `fork()` makes a second bare
  repository that plays a contributor's fork.
- `payload(name, **changes)`: one of GitHub's published example payloads (tests/bot/payloads),
  adapted to this world.
- `deliver(...)`: sign and POST a delivery over real HTTP.
- `BotProcess`: `python -m atrex.bot serve|worker` as a subprocess in its own process group, so
  a test can `kill -9` it (and its children) at any moment.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
PAYLOADS = Path(__file__).resolve().parent / "payloads"
EXAMPLE_OP = ROOT / "examples" / "kernels" / "rmsnorm"
ATREX_TOML = '[repo]\nops_root = "ops"\n\n[thresholds]\nregression = 0.05\n'


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


class KernelRepo:
    """A kernel repository with a bare remote (`remote`) and a working clone (`work`).

    `ops` maps operator names to directories to copy (default: the example rmsnorm)."""

    def __init__(self, base: Path, name: str = "kernels", ops: dict[str, Path] | None = None,
                 toml: str = ATREX_TOML):
        self.remote = base / f"{name}.git"
        self.work = base / f"{name}-work"
        git(base, "init", "--bare", "-b", "main", str(self.remote))
        git(base, "clone", str(self.remote), str(self.work))
        git(self.work, "checkout", "-b", "main")
        for op, source in (ops or {"rmsnorm": EXAMPLE_OP}).items():
            shutil.copytree(source, self.work / "ops" / op,
                            ignore=shutil.ignore_patterns("__pycache__"))
        (self.work / "atrex.toml").write_text(toml)
        (self.work / "README.md").write_text("kernels\n")
        self.commit("initial kernels")
        git(self.work, "push", "origin", "main")

    def commit(self, message: str, files: dict[str, str] | None = None) -> str:
        for rel, text in (files or {}).items():
            path = self.work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-m", message)
        return git(self.work, "rev-parse", "HEAD")

    def branch(self, name: str, start: str = "main") -> None:
        git(self.work, "checkout", "-B", name, start)

    def push(self, branch: str, remote: str = "origin") -> str:
        git(self.work, "push", "--force", remote, f"{branch}:{branch}")
        return git(self.work, "rev-parse", branch)

    def edit_kernel(self, note: str) -> None:
        """A harmless change to the rmsnorm kernel (a comment), not committed."""
        kernel = self.work / "ops" / "rmsnorm" / "kernel.py"
        kernel.write_text(kernel.read_text() + f"\n# {note}\n")

    def touch_kernel(self, note: str) -> str:
        """Commit a harmless change to the rmsnorm kernel, return the new SHA."""
        self.edit_kernel(note)
        return self.commit(f"rmsnorm: {note}")

    def fork(self, base: Path, name: str) -> Path:
        """A second bare repository (the contributor's fork), added as remote `fork`."""
        path = base / f"{name}.git"
        git(base, "clone", "--bare", str(self.remote), str(path))
        git(self.work, "remote", "add", "fork", str(path))
        return path


def payload(name: str, **changes) -> dict:
    """A published example payload (tests/bot/payloads/<name>.json), with fields replaced.

    `changes` keys are dotted paths (use `__` for `.`), e.g. pull_request__head__sha="...".
    """
    data = copy.deepcopy(json.loads((PAYLOADS / f"{name}.json").read_text()))
    for dotted, value in changes.items():
        keys = dotted.split("__")
        target = data
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return data


def pr_payload(action: str, repo: str, number: int, head_sha: str, head_ref: str,
               head_repo: str | None = None, clone_url: str = "", head_clone_url: str = "",
               installation_id: int = 1, draft: bool = False) -> dict:
    data = payload(f"pull_request.{action}")
    pr = data["pull_request"]
    data["number"] = pr["number"] = number
    data["repository"]["full_name"] = repo
    data["repository"]["name"] = repo.split("/")[1]
    data["installation"] = {"id": installation_id, "node_id": "I"}
    pr["draft"] = draft
    pr["head"].update(sha=head_sha, ref=head_ref)
    pr["head"]["repo"] = {**pr["head"]["repo"], "full_name": head_repo or repo,
                          "clone_url": head_clone_url or clone_url}
    pr["base"]["repo"] = {**pr["base"]["repo"], "full_name": repo, "clone_url": clone_url}
    pr["base"]["ref"] = "main"
    return data


def comment_payload(repo: str, number: int, comment: dict, installation_id: int = 1,
                    action: str = "created") -> dict:
    data = payload(f"issue_comment.{action}")
    data["repository"]["full_name"] = repo
    data["installation"] = {"id": installation_id, "node_id": "I"}
    data["issue"]["number"] = number
    data["issue"]["pull_request"] = {"url": f"https://example.invalid/{repo}/pulls/{number}"}
    data["comment"] = {**data["comment"], **{k: v for k, v in comment.items()
                                             if not k.startswith("_")}}
    return data


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def deliver(url: str, event: str, data: dict | bytes, secret: str,
            delivery_id: str | None = None, signature: str | None = None,
            timeout: float = 10) -> requests.Response:
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
               "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/test",
               "X-Hub-Signature-256": signature if signature is not None else sign(secret, body)}
    return requests.post(url + "/webhook", data=body, headers=headers, timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], object], timeout: float = 120, interval: float = 0.1,
             what: str = "condition") -> object:
    """Poll until `predicate()` is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


class BotProcess:
    """`python -m atrex.bot <args>` (or another `module` with the same commands, such as the agent
    test harness) in its own process group, logging to a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, module: str = "atrex.bot"):
        self.args, self.env, self.log, self.module = args, env, log, module
        self.proc: subprocess.Popen | None = None

    def start(self) -> BotProcess:
        handle = open(self.log, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *self.args], cwd=ROOT,
                                     env=self.env, stdout=handle, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        handle.close()
        return self

    def kill9(self) -> None:
        """SIGKILL the whole process group: no cleanup, no graceful anything."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill9()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class BotServer(BotProcess):
    def __init__(self, env: dict[str, str], log: Path, port: int | None = None):
        self.port = port or free_port()
        super().__init__(["serve", "--host", "127.0.0.1", "--port", str(self.port)], env, log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> BotServer:
        super().start()
        wait_for(self._healthy, timeout=60, what=f"server on {self.port}\n{self.output()}")
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited {self.proc.returncode}:\n{self.output()}")
        try:
            return requests.get(self.url + "/healthz", timeout=1).status_code == 200
        except (requests.ConnectionError, requests.Timeout):  # still starting (a loaded host)
            return False
