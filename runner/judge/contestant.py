"""One contestant's executor process, as the judge drives it: start, request, deadline, restart.

Every request carries a fresh sequence number and a deadline. An answer that does not echo it, a
malformed message, a channel that closes, an exit (with any code, 0 included) before answering, or
no answer in time is the contestant's failure, never a result: `ContestantFailed` says which.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ... import import_root
from .. import memory
from ..contract import protocol as p
from ..contract import wire
from ..model import FindingKind, Status
from ..zygote import ForkedProcess, Zygote
from . import procs


@dataclass
class ContestantSpec:
    label: str
    kernel: Path
    root: Path
    role: str = "candidate"  # or "baseline": the reference itself, eager or compiled
    writable: tuple[str, ...] = ()  # directories it may write besides its scratch
    unreadable: tuple[str, ...] = ()  # files and directories it may not read (secrets)


class ContestantFailed(Exception):
    def __init__(self, status: Status, kind: FindingKind, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


class Opaque:
    """An output that arrived as a description, not as data (a subclass, an arbitrary object)."""

    def __init__(self, description: str):
        self.description = description


class Contestant:
    def __init__(self, spec: ContestantSpec, device: str, scratch: Path, timeout_s: float,
                 mutates: list[str], zygote: Zygote | None = None):
        self.spec = spec
        self.device = device
        self.scratch = scratch / f"executor-{_safe(spec.label)}"
        self.timeout_s = timeout_s
        self.mutates = mutates
        self.zygote = zygote
        self.proc: subprocess.Popen | ForkedProcess | None = None
        self.oom_before: int | None = None  # the cgroup's OOM kills when the process started
        self.sock: socket.socket | None = None
        self.seq = 0
        self.broken = False  # needs a fresh process before its next request
        self.dead = False  # its candidate failed to load: no further requests
        # what the executor said confines it, before the import (LOAD's first answer); None: no
        # Landlock
        self.landlock_abi: int | None = None
        self.hidden_paths = 0
        self.heartbeat = None  # called before every request: tells the evaluator we are alive
        self.siblings = lambda: [self.pid] if self.pid else []  # every executor of this judge

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    # -- process -------------------------------------------------------------------------------
    def start(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = executor_env(dict(os.environ), self.scratch, self.spec)
        log_path = self.scratch / "executor.log"
        try:
            if self.zygote is not None:
                self.proc = self.zygote.spawn(
                    "atrex.runner.executor", ["--socket-fd", "{socket}"], cwd=self.scratch, env=env,
                    log_path=log_path, fds={"socket": theirs.fileno()})
            else:
                with open(log_path, "ab") as log:
                    self.proc = subprocess.Popen(
                        [sys.executable, "-s", "-m", "atrex.runner.executor", "--socket-fd",
                         str(theirs.fileno())], stdin=subprocess.DEVNULL, stdout=log,
                        stderr=subprocess.STDOUT, pass_fds=(theirs.fileno(),), cwd=self.scratch,
                        env=env, start_new_session=True)
        finally:
            theirs.close()
        self.sock, self.seq, self.broken = ours, 0, False
        self.oom_before = memory.oom_kills()

    def load(self) -> tuple[p.Raised | None, list[p.GuardFlag]]:
        baseline = self.spec.role == "baseline"
        confined, _ = self.request(p.LOAD, kernel=str(self.spec.kernel),
                                   root=str(self.spec.root), device=self.device,
                                   mutates=self.mutates,
                                   own_roots=[] if baseline else [str(self.spec.root)],
                                   check_triton=not baseline, record_dispatch=not baseline,
                                   writable=list(self.spec.writable),
                                   unreadable=list(self.spec.unreadable))
        # two answers: how the executor confined itself (sent before the candidate's import, so
        # its code cannot change it), then the import's outcome
        if confined.get("confined") is not True:
            self.discard()
            raise ContestantFailed(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                                   "the executor answered LOAD without first saying how it is "
                                   "confined")
        self.landlock_abi = confined.get("landlock_abi")
        self.hidden_paths = int(confined.get("hidden_paths", 0))
        header, _ = self.follow_up(p.LOAD)
        raised = p.from_wire(p.Raised, header["raised"]) if header.get("raised") else None
        flags = p.from_wire(list[p.GuardFlag], header.get("flags", []))
        return raised, flags

    def settle(self) -> None:
        """One request with nothing to do after a stage's last one: a message nobody asked for
        behind that last answer (a candidate answering for the executor) is a protocol finding
        now, while the stage's verdict can still take it, not at the next shape or at EXIT."""
        self.request(p.SETTLE)

    def restart(self) -> tuple[p.Raised | None, list[p.GuardFlag]]:
        self.kill()
        self.start()
        return self.load()

    def strays(self) -> list[int]:
        """Live processes this executor started (see procs.strays); orphans of forked executors
        are re-parented to the zygote, which lists them."""
        if self.pid is None:
            return []
        found = set(procs.strays(self.pid, self.siblings()))
        if self.zygote is not None:
            found |= set(self.zygote.strays())
        return sorted(found)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None and not self.broken:
            with contextlib.suppress(ContestantFailed):
                self.request(p.EXIT, timeout_s=10)
        self.kill()

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return (self.scratch / "executor.log").read_bytes()[-limit:].decode(errors="replace")
        except OSError:
            return ""

    # -- requests ------------------------------------------------------------------------------
    def request(self, command: str, blobs: list | None = None, timeout_s: float | None = None,
                **fields) -> tuple[dict, list[bytearray]]:
        if self.sock is None or self.broken:
            raise ContestantFailed(Status.RUNTIME_ERROR, FindingKind.RUNTIME_ERROR,
                                   "the executor is not running")
        if self.heartbeat is not None:
            self.heartbeat()
        self.seq += 1
        timeout_s = timeout_s or self.timeout_s
        deadline = time.monotonic() + timeout_s
        self._send(command, {"cmd": command, "seq": self.seq, **fields}, blobs, deadline,
                   timeout_s)
        return self._answer_to(command, deadline, timeout_s)

    def follow_up(self, command: str, timeout_s: float | None = None
                  ) -> tuple[dict, list[bytearray]]:
        """The next answer to the last request, for one that has two (LOAD)."""
        if self.heartbeat is not None:
            self.heartbeat()
        timeout_s = timeout_s or self.timeout_s
        return self._answer_to(command, time.monotonic() + timeout_s, timeout_s)

    def _answer_to(self, command: str, deadline: float,
                   timeout_s: float) -> tuple[dict, list[bytearray]]:
        header, data = self._receive(command, deadline, timeout_s)
        if header.get("seq") != self.seq:
            self.discard()
            raise ContestantFailed(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                                   f"an answer to a request the judge did not make (sequence "
                                   f"{str(header.get('seq'))[:20]}, expected {self.seq})")
        return header, data

    def _send(self, command: str, header: dict, blobs: list | None, deadline: float,
              timeout_s: float) -> None:
        try:
            wire.send_message(self.sock, header, blobs, deadline, peer_silent=True)
        except wire.PeerSpoke:
            self.discard()
            raise ContestantFailed(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                                   f"the executor sent a message no request asked for, before "
                                   f"or while the judge sent its {command} request (one answer "
                                   "per request)") from None
        except wire.PeerTimeout:
            self.discard()
            raise ContestantFailed(Status.TIMEOUT, FindingKind.TIMEOUT,
                                   f"the executor did not read the {command} request within "
                                   f"{timeout_s:g} s; it was killed") from None
        except (wire.PeerClosed, BrokenPipeError, ConnectionResetError):
            raise self._died(command) from None

    def _receive(self, command: str, deadline: float,
                 timeout_s: float) -> tuple[dict, list[bytearray]]:
        try:
            return wire.recv_message(self.sock, deadline)
        except wire.PeerTimeout:
            self.discard()
            raise ContestantFailed(Status.TIMEOUT, FindingKind.TIMEOUT,
                                   f"no answer to {command} within {timeout_s:g} s; the executor "
                                   "was killed") from None
        except (wire.PeerClosed, BrokenPipeError, ConnectionResetError):
            raise self._died(command) from None
        except wire.ProtocolError as exc:
            self.discard()
            raise ContestantFailed(Status.SUSPICIOUS, FindingKind.PROTOCOL,
                                   f"the executor broke the message contract: {exc}") from None

    def discard(self) -> None:
        """This process is done for; the judge starts a fresh one before its next shape."""
        self.broken = True
        self.kill()

    def _died(self, command: str) -> ContestantFailed:
        ended = memory.wait_exit(self.proc) if self.proc else None
        self.broken = True
        self.kill()
        tail = [line for line in self.log_tail().strip().splitlines() if line.strip()]
        detail = f": {tail[-1][:300]}" if tail else ""
        how = "is gone" if ended is None else memory.describe_exit(ended, self.oom_before)
        return ContestantFailed(Status.RUNTIME_ERROR, FindingKind.RUNTIME_ERROR,
                                f"the executor {how} before answering {command}{detail}")


def executor_env(env: dict[str, str], scratch: Path, spec: ContestantSpec) -> dict[str, str]:
    """The judge's (already scrubbed) environment, with the executor's own scratch directory and
    compile caches of its own."""
    env["HOME"] = str(scratch)
    env["TMPDIR"] = str(scratch)
    for variable in ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR"):
        if env.get(variable):
            env[variable] = str(Path(env[variable]) / cache_namespace(spec))
    env["PYTHONPATH"] = str(import_root())
    # Inductor compiles in this process instead of a pool of workers that outlive the call.
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    return env


def cache_namespace(spec: ContestantSpec) -> str:
    """The subdirectory of a shared compile cache that is this contestant's: by label and root,
    so a repository's kernel finds its compiled binaries again in the next run, and (with the
    executor's Landlock rules, runner/executor/confine.py) no contestant can write a binary
    where another will load it."""
    digest = hashlib.sha256(f"{spec.label}\0{spec.root.resolve()}".encode()).hexdigest()[:16]
    return f"{_safe(spec.label)}-{digest}"


def place_tensor(device: str):
    """Where the judge puts an output: on the GPU if the executor's copy was there (on a CPU run
    the executor maps cuda to the CPU, so everything arrives on the CPU)."""
    def place(tensor: torch.Tensor, where) -> torch.Tensor:
        if where not in ("cpu", "cuda"):
            raise wire.ProtocolError(f"unknown device {where!r}")
        return tensor.to("cuda") if where == "cuda" and device == "cuda" else tensor
    return place


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:80]
