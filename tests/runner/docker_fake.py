"""A Docker-compatible engine for tests, on loopback: the real Docker SDK talks HTTP to it.

It implements the few Engine API calls `containers.run(detach=True)`, `reload`, `wait`, `logs`,
`kill` and `remove` make, and "runs" a container by starting its command as a local process with
the container's environment and working directory (the image is this checkout: `python3` is the
test's interpreter and the checkout is on PYTHONPATH). Every create request is recorded, so tests
can assert the sandbox policy the runner asked for.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
API = "1.43"


class FakeEngine:
    def __init__(self):
        self.created: list[dict] = []
        self.killed: list[str] = []
        self.containers: dict[str, dict] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"tcp://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        for container in self.containers.values():
            if container["proc"] and container["proc"].poll() is None:
                container["proc"].kill()
        self.server.shutdown()

    def run(self, spec: dict) -> subprocess.Popen:
        env = dict(item.split("=", 1) for item in spec.get("Env") or [])
        env["PYTHONPATH"] = str(ROOT)
        env["PATH"] = os.environ.get("PATH", "")
        argv = list(spec.get("Entrypoint") or []) + list(spec.get("Cmd") or [])
        command = [sys.executable if c == "python3" else c for c in argv]
        log = open(Path(spec["WorkingDir"]) / "container-output.log", "wb")  # noqa: SIM115
        return subprocess.Popen(command, env=env, cwd=spec["WorkingDir"], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    def _handler(self):
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body=None, raw: bytes | None = None):
                data = raw if raw is not None else (b"" if body is None else
                                                    json.dumps(body).encode())
                self.send_response(code)
                self.send_header("Content-Type", "application/json" if raw is None else
                                 "application/vnd.docker.raw-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _path(self) -> str:
                return re.sub(r"^/v[0-9.]+", "", self.path.split("?")[0])

            def do_GET(self):
                path = self._path()
                if path == "/_ping":
                    return self._send(200, raw=b"OK")
                if path == "/version":
                    return self._send(200, {"ApiVersion": API, "Version": "fake"})
                match = re.fullmatch(r"/containers/(\w+)/(json|logs)", path)
                if not match or match.group(1) not in engine.containers:
                    return self._send(404, {"message": "no such container"})
                container = engine.containers[match.group(1)]
                if match.group(2) == "logs":
                    log = Path(container["spec"]["WorkingDir"]) / "container-output.log"
                    data = log.read_bytes() if log.exists() else b""
                    return self._send(200, raw=struct.pack(">BxxxL", 1, len(data)) + data)
                return self._send(200, engine.inspect(match.group(1)))

            def do_POST(self):
                path = self._path()
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if path == "/containers/create":
                    cid = uuid.uuid4().hex
                    engine.created.append(body)
                    engine.containers[cid] = {"spec": body, "proc": None}
                    return self._send(201, {"Id": cid, "Warnings": []})
                match = re.fullmatch(r"/containers/(\w+)/(start|wait|kill)", path)
                if not match or match.group(1) not in engine.containers:
                    return self._send(404, {"message": "no such container"})
                cid, action = match.groups()
                container = engine.containers[cid]
                if action == "start":
                    container["proc"] = engine.run(container["spec"])
                    return self._send(204)
                if action == "kill":
                    engine.killed.append(cid)
                    if container["proc"]:
                        os.killpg(container["proc"].pid, 9)
                    return self._send(204)
                return self._send(200, {"StatusCode": container["proc"].wait()})

            def do_DELETE(self):
                return self._send(204)

        return Handler

    def inspect(self, cid: str) -> dict:
        proc = self.containers[cid]["proc"]
        running = proc is not None and proc.poll() is None
        status = "created" if proc is None else ("running" if running else "exited")
        return {"Id": cid, "Name": f"/{cid[:12]}", "Config": self.containers[cid]["spec"],
                "State": {"Status": status, "Running": running,
                          "ExitCode": None if running or proc is None else proc.returncode}}
