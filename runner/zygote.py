"""A fork server for CPU runs: judges and executors forked from one clean interpreter.

Starting a Python that imports torch, Triton and torch's compiler stack costs about 2.8 s of CPU
on a two-core CI machine (measured 2026-12-04: `import torch, triton, torch._dynamo` = 2.5 s user
+ 0.3 s sys); an `atrex check` of the four example operators started nine such processes, and
that was 80% of its CPU time. The zygote pays it once per evaluation: it is started like a judge
(a fresh interpreter, the scrubbed environment, nothing on stdin), imports those libraries and
then only forks. It never reads a job, an operator, a reference, an input or a candidate, so a
child inherits no data: a judge's secrets (seeds, expected outputs) exist only in the judge, and
an executor forked after them still comes from the zygote's clean image, not the judge's.

Each child starts a new session, gets the working directory, environment, log file and file
descriptors it would have had as a subprocess, closes every other descriptor it inherited (the
zygote's control sockets among them), and runs `python -m <module>` as `runpy` does. A judge's
child also gets a control socket of its own, to ask for its executors. The zygote is a child
subreaper, so a process an executor double-forks away ends up its child: `strays` reports those.

Only CPU runs use it: on a GPU every judge and executor is still a fresh interpreter (forking a
process that imported the CUDA stack has not been measured on the H200 yet).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .judge.procs import refuse_inspection

_MAX_MESSAGE = 1 << 20
_MAX_FDS = 8
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NAME = 15
# The modules the zygote runs, and the process name each child gets (its command line stays the
# zygote's: `ps -o comm`, or /proc/PID/comm, tells them apart).
_NAMES = {"atrex.runner.judge": b"atrex-judge", "atrex.runner.executor": b"atrex-executor"}


class ZygoteError(RuntimeError):
    """The zygote refused a request or is gone."""


# --- client ---------------------------------------------------------------------------------------

class Zygote:
    """The client end of a zygote's control socket (one request at a time)."""

    def __init__(self, sock: socket.socket, proc: subprocess.Popen | None = None):
        self._sock = sock
        self._proc = proc
        self._lock = threading.Lock()

    @classmethod
    def start(cls, env: dict[str, str], cwd: Path, log_path: Path,
              python: str = sys.executable) -> Zygote:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [python, "-s", "-m", "atrex.runner.zygote", "--control-fd", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),), cwd=cwd, env=env, start_new_session=True)
        theirs.close()
        return cls(ours, proc)

    @classmethod
    def from_fd(cls, fd: int) -> Zygote:
        return cls(socket.socket(fileno=fd))

    def spawn(self, module: str, args: list[str], *, cwd: Path, env: dict[str, str],
              log_path: Path, fds: dict[str, int], stdin: str | None = None,
              control: bool = False) -> ForkedProcess:
        """Fork `python -m module args...`. `fds` name descriptors to hand over; `{name}` in
        `args` becomes the child's number for that descriptor, and `stdin` names the one to use
        as standard input (else /dev/null). `control`: the child gets a zygote socket of its
        own, whose number replaces `{zygote}`."""
        names = list(fds)
        reply = self._request({"op": "spawn", "module": module, "args": args, "cwd": str(cwd),
                               "env": env, "log": str(log_path), "fds": names, "stdin": stdin,
                               "control": control}, [fds[n] for n in names])
        return ForkedProcess(int(reply["pid"]), self)

    def poll(self, pid: int) -> tuple[int | None, int | None]:
        """(exit code, peak resident bytes), both None while the child runs."""
        reply = self._request({"op": "poll", "pid": pid})
        return reply["code"], reply.get("peak_rss_bytes")

    def strays(self) -> list[int]:
        """Live processes that ended up the zygote's children without being spawned by it."""
        return [int(pid) for pid in self._request({"op": "strays"})["pids"]]

    def close(self) -> None:
        self._sock.close()
        if self._proc is not None:
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()

    def _request(self, message: dict, fds: list[int] | None = None) -> dict:
        with self._lock:
            try:
                socket.send_fds(self._sock, [json.dumps(message).encode()], fds or [])
                data, _, _, _ = socket.recv_fds(self._sock, _MAX_MESSAGE, 0)
            except OSError as exc:
                raise ZygoteError(f"the zygote is gone: {exc}") from None
        if not data:
            raise ZygoteError("the zygote is gone")
        reply = json.loads(data)
        if "error" in reply:
            raise ZygoteError(reply["error"])
        return reply


class ForkedProcess:
    """What the callers of `subprocess.Popen` use of it: pid, poll, wait (pid = process group)."""

    def __init__(self, pid: int, zygote: Zygote):
        self.pid = pid
        self.returncode: int | None = None
        self.atrex_peak_rss: int | None = None  # as runner.memory.wait_exit reads it
        self._zygote = zygote

    def poll(self) -> int | None:
        """The zygote reaps its children, so its word is the only one taken. /proc cannot tell:
        a multi-threaded process's leader shows as a zombie while its other threads still exit,
        and waiting on it then returns nothing yet (under xdist, 2 of 3 runs of the suite's CPU
        tests called such a judge killed). Only once the zygote itself is gone, taking its
        children along, does a child that has left /proc count as killed."""
        if self.returncode is None:
            try:
                self.returncode, self.atrex_peak_rss = self._zygote.poll(self.pid)
            except ZygoteError:
                if not Path(f"/proc/{self.pid}").exists():
                    self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return self.returncode


# --- server ---------------------------------------------------------------------------------------

@dataclass
class _Client:
    sock: socket.socket
    spawned: set[int] = field(default_factory=set)


class _Server:
    def __init__(self, root: socket.socket):
        self.root = root
        self.clients: dict[int, _Client] = {root.fileno(): _Client(root)}
        self.codes: dict[int, int] = {}  # exit codes of spawned children, once reaped
        self.peak_rss: dict[int, int] = {}  # and their peak resident memory (bytes)
        self.owner: dict[int, _Client] = {}

    def serve(self) -> None:
        while self.root.fileno() in self.clients:
            ready, _, _ = select.select(list(self.clients), [], [], 0.05)
            for fd in ready:
                self._serve_one(self.clients[fd])
            self._reap()
        for client in list(self.clients.values()):
            self._drop(client)

    def _serve_one(self, client: _Client) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(client.sock, _MAX_MESSAGE, _MAX_FDS)
        except OSError:
            data, fds = b"", []
        if not data:
            for fd in fds:
                os.close(fd)
            self._drop(client)
            return
        try:
            reply = self._handle(client, json.loads(data), fds)
        except (ValueError, KeyError, TypeError, OSError) as exc:
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(OSError):
            socket.send_fds(client.sock, [json.dumps(reply).encode()], [])

    def _handle(self, client: _Client, request: dict, fds: list[int]) -> dict:
        op = request["op"]
        if op == "spawn":
            return {"pid": self._spawn(client, request, fds)}
        if op == "poll":
            self._reap()
            pid = int(request["pid"])
            if pid not in client.spawned and pid not in self.codes:
                return {"error": f"pid {pid} was not spawned by this client"}
            return {"code": self.codes.get(pid), "peak_rss_bytes": self.peak_rss.get(pid)}
        if op == "strays":
            self._reap()
            live = {pid for pid in self.owner if pid not in self.codes}
            return {"pids": [pid for pid in _children(os.getpid()) if pid not in live]}
        return {"error": f"unknown request {op!r}"}

    def _spawn(self, client: _Client, request: dict, fds: list[int]) -> int:
        if request["module"] not in _NAMES:
            raise ValueError(f"not a module the zygote runs: {request['module']!r}")
        names = list(request["fds"])
        if len(names) != len(fds):
            raise ValueError("descriptor names and descriptors differ in number")
        passed = dict(zip(names, fds, strict=True))
        control = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET) \
            if request.get("control") else None
        pid = os.fork()
        if pid == 0:
            if control is not None:
                control[0].close()
                passed["zygote"] = control[1].fileno()
            _become_child(request, passed)  # never returns
        if control is not None:
            control[1].close()
            self.clients[control[0].fileno()] = _Client(control[0])
        client.spawned.add(pid)
        self.owner[pid] = client
        self.codes.pop(pid, None)  # a pid the system handed out again
        self.peak_rss.pop(pid, None)
        return pid

    def _reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in self.owner:
                self.codes[pid] = os.waitstatus_to_exitcode(status)
                self.peak_rss[pid] = usage.ru_maxrss * 1024  # Linux reports KiB

    def _drop(self, client: _Client) -> None:
        """A client that went away takes its live children with it."""
        self.clients.pop(client.sock.fileno(), None)
        for pid in client.spawned:
            if pid not in self.codes:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        client.sock.close()


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if stat[0] != "Z" and int(stat[1]) == parent:
                found.append(int(entry.name))
    return found


def _become_child(request: dict, passed: dict[str, int]) -> None:
    """In the forked child: the process a subprocess start would have given, then the module."""
    code = 1
    try:
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the zygote died before the request took effect
            os._exit(1)
        _prctl(_PR_SET_NAME, _NAMES[request["module"]])  # what `ps -o comm` and /proc show
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGPIPE else signal.SIG_IGN)
        keep = _standard_streams(request, passed)
        _close_all_but(keep | {0, 1, 2})
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _fresh_process_state(request["cwd"])
        args = [arg.format(**{k: str(v) for k, v in passed.items()}) for arg in request["args"]]
        sys.argv = [request["module"], *args]
        import runpy

        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - whatever it was, the child must exit here
        import traceback

        traceback.print_exc()
    finally:
        _exit(code)


def _standard_streams(request: dict, passed: dict[str, int]) -> set[int]:
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    stdin = passed.get(request["stdin"]) if request.get("stdin") else None
    source = stdin if stdin is not None else os.open(os.devnull, os.O_RDONLY)
    os.dup2(source, 0)
    if stdin is None:
        os.close(source)
    return set(passed.values())


def _close_all_but(keep: set[int]) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _fresh_process_state(cwd: str) -> None:
    """What a new interpreter would not share with its siblings."""
    import random
    import tempfile

    tempfile.tempdir = None  # TMPDIR is the child's own scratch directory
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    sys.path[0] = cwd  # as `python -m` started there would have it


def _exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _exit(code: int) -> None:
    import atexit

    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(code)


def _prctl(option: int, value: int | bytes) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        arg = ctypes.c_char_p(value) if isinstance(value, bytes) else value
        ctypes.CDLL(None, use_errno=True).prctl(option, arg)


def _preload() -> None:
    """What every judge and executor imports; never anything that touches a device."""
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401 - imported by the first TorchFunctionMode call anyway
    import triton  # noqa: F401
    import triton.language  # noqa: F401


def main(argv: list[str]) -> int:
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:
        return 1
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    refuse_inspection()  # forked children inherit it
    _preload()
    root = socket.socket(fileno=int(args["--control-fd"]))
    _Server(root).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
