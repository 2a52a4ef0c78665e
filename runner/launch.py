"""How a judge process is started: a local subprocess, or a container from the runner image.

Both hand the judge the same job and read the same JSON-lines channel; the judge starts one
executor process per contestant beside itself, so in container mode the executors share the
container. They differ in what the candidate can reach. The subprocess gets a scrubbed
environment, and the evaluator, the zygote and the judge refuse its /proc and ptrace
(docs/threat-model.md). The container also gets no network, read-only mounts of the code under
test, one scratch directory, CPU / memory / process limits and only the GPU it was given (Docker
SDK; any Docker-compatible engine).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .channel import KEY_VARIABLE, Opener, new_key
from .judge.procs import refuse_inspection
from .memory import wait_exit
from .zygote import ForkedProcess, Zygote


class WorkerHandle(Protocol):
    def read_messages(self, timeout: float) -> list[dict] | None:
        """The judge's messages that arrived within `timeout` seconds; None once the channel
        closed. Raises channel.Tampered at a line the judge did not write."""

    def kill(self) -> None: ...

    def wait(self) -> int: ...

    def log_tail(self) -> str: ...


class Launcher(Protocol):
    name: str

    def session(self, device: str, env: dict[str, str],
                scratch: Path) -> contextlib.AbstractContextManager[Launcher]:
        """The launcher one evaluation uses from start to end (it may hold a process)."""

    def start(self, payload: dict, env: dict[str, str], scratch: Path,
              mounts: list[Path], device: str, device_index: int) -> WorkerHandle: ...


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_bytes()[-limit:].decode(errors="replace")
    except OSError:
        return ""


class _Messages:
    """Splits the channel's bytes into lines and opens each (runner/channel.py)."""

    def __init__(self, key: str):
        self.pending = b""
        self.opener = Opener(key)

    def feed(self, chunk: bytes) -> list[dict]:
        self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        return [self.opener.open(line) for line in lines if line.strip()]


def _sealed(env: dict[str, str]) -> tuple[dict[str, str], str]:
    """The judge's environment with a fresh channel key, and the key."""
    key = new_key()
    return {**env, KEY_VARIABLE: key}, key


# --- local subprocess ---------------------------------------------------------------------------

class SubprocessLauncher:
    name = "subprocess"

    def __init__(self, python: str = sys.executable, zygote: Zygote | None = None):
        self.python = python
        self.zygote = zygote

    @contextlib.contextmanager
    def session(self, device: str, env: dict[str, str], scratch: Path) -> Iterator[Launcher]:
        """One evaluation's launcher: on a CPU run, judges and executors forked from a zygote
        (runner/zygote.py) started for it; otherwise this launcher as it is."""
        if device != "cpu" or self.zygote is not None or not zygote_enabled():
            yield self
            return
        zygote = Zygote.start(env, scratch, scratch / "zygote.log", self.python)
        try:
            yield SubprocessLauncher(self.python, zygote)
        finally:
            zygote.close()

    def start(self, payload, env, scratch, mounts, device, device_index) -> WorkerHandle:
        refuse_inspection()  # candidates will run as this process's user, beside it
        env, key = _sealed(env)
        read_fd, write_fd = os.pipe()
        log_path = scratch / "worker.log"
        if self.zygote is not None:
            proc = self._fork_judge(payload, env, scratch, log_path, write_fd)
        else:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [self.python, "-s", "-m", "atrex.runner.judge", "--channel-fd", str(write_fd)],
                    stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                    pass_fds=(write_fd,), cwd=scratch, env=env, start_new_session=True)
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(json.dumps(payload).encode())
                proc.stdin.close()
        os.close(write_fd)
        return _ProcessHandle(proc, os.fdopen(read_fd, "rb", buffering=0), log_path, key)

    def _fork_judge(self, payload, env, scratch, log_path, channel_fd) -> ForkedProcess:
        job_read, job_write = os.pipe()
        try:
            proc = self.zygote.spawn(
                "atrex.runner.judge", ["--channel-fd", "{channel}", "--zygote-fd", "{zygote}"],
                cwd=scratch, env=env, log_path=log_path,
                fds={"channel": channel_fd, "job": job_read}, stdin="job", control=True)
        finally:
            os.close(job_read)
        with os.fdopen(job_write, "wb") as job, contextlib.suppress(BrokenPipeError):
            job.write(json.dumps(payload).encode())
        return proc


def zygote_enabled() -> bool:
    """`ATREX_ZYGOTE=0` starts every judge and executor as a fresh interpreter on CPU too."""
    return os.environ.get("ATREX_ZYGOTE", "1") != "0" and sys.platform.startswith("linux")


class _ProcessHandle:
    def __init__(self, proc: subprocess.Popen | ForkedProcess, pipe, log_path: Path, key: str):
        self.proc, self.pipe, self.log_path = proc, pipe, log_path
        self.ended = None
        self.messages = _Messages(key)

    def read_messages(self, timeout: float) -> list[dict] | None:
        ready, _, _ = select.select([self.pipe], [], [], timeout)
        if not ready:
            return []
        chunk = self.pipe.read(65536)
        if not chunk:
            self.pipe.close()
            return None
        return self.messages.feed(chunk)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self) -> int:
        self.ended = wait_exit(self.proc)  # with the peak RSS, to tell an OOM kill apart
        if not self.pipe.closed:
            self.pipe.close()
        return self.ended.code

    def log_tail(self) -> str:
        return _tail(self.log_path)


# --- container ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ContainerPolicy:
    image: str
    memory: str = "64g"
    cpus: float = 8.0
    pids: int = 4096
    shm: str = "8g"
    user: str = "atrex"
    nofile: int = 16384  # open files; set explicitly: some engines copy limits the host forbids
    nproc: int = 4096  # processes of the container's user (with `pids`, a fork-bomb stop)


class ContainerLauncher:
    """Runs the worker in a container; job and channel travel through the scratch mount."""

    def __init__(self, client, policy: ContainerPolicy):
        self.client = client
        self.policy = policy
        self.name = f"container:{policy.image}"

    @contextlib.contextmanager
    def session(self, device: str, env: dict[str, str], scratch: Path) -> Iterator[Launcher]:
        yield self  # each judge is a container of its own

    def start(self, payload, env, scratch, mounts, device, device_index) -> WorkerHandle:
        job_file, channel_file = scratch / "job.json", scratch / "channel.jsonl"
        job_file.write_text(json.dumps(payload))
        channel_file.write_bytes(b"")
        env, key = _sealed(env)
        container = self.client.containers.run(
            self.policy.image, detach=True, **self.run_kwargs(
                env, scratch, mounts, device, device_index, job_file, channel_file))
        return _ContainerHandle(container, channel_file, scratch / "worker.log", key)

    def run_kwargs(self, env, scratch, mounts, device, device_index, job_file,
                   channel_file) -> dict:
        """The sandbox policy, as Docker SDK arguments (kept separate so it can be inspected)."""
        import docker.types

        volumes = {str(path): {"bind": str(path), "mode": "ro"} for path in mounts}
        volumes[str(scratch)] = {"bind": str(scratch), "mode": "rw"}
        device_requests = []
        if device == "cuda":
            device_requests.append(docker.types.DeviceRequest(
                device_ids=[env.get("CUDA_VISIBLE_DEVICES", str(device_index))],
                capabilities=[["gpu"]]))
        container_env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PATH")}
        container_env["CUDA_VISIBLE_DEVICES"] = "0" if device == "cuda" else ""
        return {
            # the entrypoint too: the runner image's own entrypoint is `atrex worker`
            "entrypoint": ["python3", "-s", "-m", "atrex.runner.judge"],
            "command": ["--job", str(job_file), "--channel", str(channel_file)],
            "environment": container_env, "working_dir": str(scratch), "user": self.policy.user,
            "network_mode": "none", "read_only": True, "tmpfs": {"/tmp": "rw,size=4g"},
            "volumes": volumes, "mem_limit": self.policy.memory,
            "nano_cpus": int(self.policy.cpus * 1e9), "pids_limit": self.policy.pids,
            "shm_size": self.policy.shm, "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"], "device_requests": device_requests,
            "ulimits": [docker.types.Ulimit(name="nofile", soft=self.policy.nofile,
                                            hard=self.policy.nofile),
                        docker.types.Ulimit(name="nproc", soft=self.policy.nproc,
                                            hard=self.policy.nproc)],
            "labels": {"atrex.role": "candidate-worker"},
        }


class _ContainerHandle:
    def __init__(self, container, channel_file: Path, log_path: Path, key: str):
        self.container, self.channel_file, self.log_path = container, channel_file, log_path
        self.oom_killed = False  # the engine's own verdict, read after the container exits
        self.offset = 0
        self.messages = _Messages(key)

    def read_messages(self, timeout: float) -> list[dict] | None:
        deadline = time.monotonic() + timeout
        while True:
            data = self._read_new()
            if data:
                return self.messages.feed(data)
            if self._exited():
                data = self._read_new()
                return self.messages.feed(data + b"\n") if data else None
            if time.monotonic() >= deadline:
                return []
            time.sleep(0.05)

    def _read_new(self) -> bytes:
        with open(self.channel_file, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        self.offset += len(data)
        return data

    def _exited(self) -> bool:
        self.container.reload()
        return self.container.status in ("exited", "dead")

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.container.kill()

    def wait(self) -> int:
        code = int(self.container.wait().get("StatusCode", 1))
        with contextlib.suppress(Exception):
            self.container.reload()
            self.oom_killed = bool(self.container.attrs["State"]["OOMKilled"])
        with contextlib.suppress(Exception):
            self.log_path.write_bytes(self.container.logs())
        with contextlib.suppress(Exception):
            self.container.remove(force=True)
        return code

    def log_tail(self) -> str:
        return _tail(self.log_path)


def choose_launcher(mode: str = "auto", image: str | None = None, *, memory: str | None = None,
                    cpus: float | None = None, pids: int | None = None,
                    client_factory=None) -> Launcher:
    """`subprocess`, `container` (fails clearly without an engine) or `auto` (container when an
    engine answers and an image is configured, else subprocess).

    ATREX_SANDBOX and ATREX_RUNNER_IMAGE (and ATREX_SANDBOX_MEMORY / _CPUS / _PIDS for limits not
    given here) come from the environment when set; the bot passes its own settings explicitly.
    `client_factory()` returns a Docker SDK client (default: `docker.from_env()`)."""
    mode = os.environ.get("ATREX_SANDBOX", mode)
    image = image or os.environ.get("ATREX_RUNNER_IMAGE")
    if mode not in ("auto", "subprocess", "container"):
        raise ValueError(f"ATREX_SANDBOX must be auto, subprocess or container, got {mode!r}")
    if mode == "subprocess" or (mode == "auto" and not image):
        return SubprocessLauncher()
    if not image:
        raise ValueError("container sandbox: set ATREX_RUNNER_IMAGE to the runner image")
    try:
        client = (client_factory or _docker_from_env)()
        client.ping()
    except Exception as exc:  # noqa: BLE001 - no SDK, no engine, or no permission: say which
        if mode == "container":
            raise ValueError(
                f"container sandbox: no Docker-compatible engine answers ({exc})") from None
        return SubprocessLauncher()
    env = os.environ
    return ContainerLauncher(client, ContainerPolicy(
        image=image, memory=memory or env.get("ATREX_SANDBOX_MEMORY", "64g"),
        cpus=float(cpus if cpus is not None else env.get("ATREX_SANDBOX_CPUS", "8")),
        pids=int(pids if pids is not None else env.get("ATREX_SANDBOX_PIDS", "4096"))))


def _docker_from_env():
    import docker

    return docker.from_env()
