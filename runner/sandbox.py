"""Running one operator's judge process, with deadlines and a scrubbed environment.

The judge (`atrex.runner.judge`) starts one executor process per contestant and decides every
status; a crash, hang, illegal memory access or out-of-memory in candidate code ends that executor,
never the judge. What ends the judge (its reference failing, a kill) ends only the shape it was on:
a fresh judge picks up the remaining shapes. On a GPU one evaluation holds the device's lock for its
whole run, so two evaluations never share a GPU while one of them is timing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .. import import_root
from . import memory
from .channel import Tampered
from .launch import Launcher, SubprocessLauncher
from .model import Status
from .scratch import job_scratch

# Variables the judge and executors may inherit; everything else (tokens, keys, App secrets) is
# dropped.
_ENV_ALLOW = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LD_LIBRARY_PATH", "CUDA_HOME",
              "CUDA_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "VIRTUAL_ENV", "CC", "CXX")
_ENV_ALLOW_PREFIXES = ("NVIDIA_", "CUDA_", "NCCL_", "TORCH_", "TRITON_", "NVSHMEM_")
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PRIVATE", "CREDENTIAL", "API_KEY", "APIKEY",
                   "AUTH", "COOKIE", "SESSION")


def scrubbed_env(device: str, device_index: int, scratch: Path,
                 source: dict[str, str] | None = None) -> dict[str, str]:
    source = dict(os.environ if source is None else source)
    env = {}
    for key, value in source.items():
        if any(marker in key.upper() for marker in _SECRET_MARKERS):
            continue
        if key in _ENV_ALLOW or key.startswith(_ENV_ALLOW_PREFIXES):
            env[key] = value
    env["HOME"] = str(scratch)
    env["TMPDIR"] = str(scratch)
    env["PYTHONPATH"] = str(import_root())
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("TRITON_CACHE_DIR", str(_cache_dir() / "triton"))
    env.setdefault("TORCH_EXTENSIONS_DIR", str(_cache_dir() / "torch_extensions"))
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env.pop("TRITON_INTERPRET", None)
        env["CUDA_VISIBLE_DEVICES"] = str(_physical_index(source, device_index))
    return env


def _physical_index(source: dict[str, str], index: int) -> str:
    visible = source.get("CUDA_VISIBLE_DEVICES")
    if visible:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if index < len(ids):
            return ids[index]
    return str(index)


def _cache_dir() -> Path:
    return Path(os.environ.get("ATREX_CACHE_DIR", Path.home() / ".cache" / "atrex"))


@contextlib.contextmanager
def device_lock(device: str, device_index: int) -> Iterator[None]:
    """One evaluation per GPU at a time, across processes (an flock on a per-device file)."""
    if device != "cuda":
        yield
        return
    lock_dir = Path(os.environ.get("ATREX_LOCK_DIR", tempfile.gettempdir()))
    lock_dir.mkdir(parents=True, exist_ok=True)
    visible = _physical_index(dict(os.environ), device_index)
    with open(lock_dir / f"atrex-gpu{visible}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass
class CandidateRef:
    label: str
    kernel: Path
    root: Path
    # "baseline" (the reference itself, eager or compiled, for `atrex bench`): checked for
    # correctness and timed, but not held to the own-kernel and anti-cheat rules.
    role: str = "candidate"
    # directories it may write besides its own scratch (runner/executor/confine.py): the compile
    # baseline's Inductor cache, shared across runs
    writable: tuple[Path, ...] = ()


@dataclass
class WorkerJob:
    op: dict  # OpSpec.to_dict()
    candidates: list[CandidateRef]
    shape_ids: list[str]
    device: str
    trials: int
    tolerances: dict[str, list[float]]
    reference_dtype: str
    own_share_threshold: float
    peaks: dict
    time: bool
    timeout_s: float
    device_index: int = 0
    timing_policy: dict = field(default_factory=dict)
    config_path: str | None = None  # the atrex.toml a configuration error points at
    max_shapes: int | None = None  # only the N shapes with the fewest input bytes
    memory_budget_bytes: int | None = None  # CPU: skip a shape whose estimate exceeds it


@dataclass
class JobOutcome:
    """Raw judge results, keyed by (label, shape id)."""

    verdicts: dict[tuple[str, str], dict] = field(default_factory=dict)
    timings: dict[tuple[str, str], dict] = field(default_factory=dict)
    work: dict[str, dict] = field(default_factory=dict)
    log_tail: str = ""
    # the operator's own files are malformed ({path, field, message}): the op stops there
    format_error: dict | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # shape id -> why it was not run
    selected: list[str] | None = None  # the shapes --max-shapes kept, smallest first
    # by label, the Landlock ABI confining each loaded executor's writes (None: not confined)
    landlock_abi: dict[str, int | None] = field(default_factory=dict)
    # by label, how many secret paths Landlock hid from each loaded executor's reads
    hidden_paths: dict[str, int] = field(default_factory=dict)
    # wall seconds of the judge's stages, by (shape, label, stage) as its `begin` messages
    # delimit them: load (shape None), reference and time (label None), check
    stage_wall_s: dict[tuple[str | None, str | None, str], float] = field(default_factory=dict)

    def add_stage(self, position: _Position, until: float) -> None:
        """Close `position`'s stage; the judge's own start and its wait after every executor
        loaded (no shape, no contestant) are nobody's stage."""
        if position.shape is None and position.label is None:
            return
        key = (position.shape, position.label, position.stage)
        self.stage_wall_s[key] = self.stage_wall_s.get(key, 0.0) + until - position.since

    def check_wall_s(self, label: str, shape_id: str) -> float | None:
        return self.stage_wall_s.get((shape_id, label, "check"))

    def load_wall_s(self, label: str) -> float | None:
        return self.stage_wall_s.get((None, label, "load"))

    def shape_wall_s(self, shape_id: str) -> float | None:
        spent = [s for (shape, _, _), s in self.stage_wall_s.items() if shape == shape_id]
        return sum(spent) if spent else None

    def shape_ids(self, planned: list[str]) -> list[str]:
        """The shapes of the plan that belong in the report."""
        return [s for s in planned if self.selected is None or s in self.selected]


@dataclass
class _Position:
    shape: str | None = None
    label: str | None = None
    stage: str = "load"
    reported: bool = False  # the judge already sent its verdict for this (label, shape)
    since: float = field(default_factory=time.monotonic)


def run_job(job: WorkerJob, on_progress: Callable[[str, str | None], None] | None = None,
            launcher: Launcher | None = None) -> JobOutcome:
    launcher = launcher or SubprocessLauncher()
    outcome = JobOutcome()
    remaining = list(job.shape_ids)
    skip: dict[str, list[str]] = {}
    dead: set[str] = set()
    with job_scratch() as scratch:
        while remaining:
            live = [c for c in job.candidates if c.label not in dead]
            if not live:
                break
            try:
                position, code, reason = _run_once(job, live, remaining, skip, scratch,
                                                   outcome, on_progress, launcher)
            except Tampered as exc:
                _void(job, live, outcome, str(exc))
                break
            remaining = outcome.shape_ids(remaining)
            if code == 0 or outcome.format_error is not None:
                break
            remaining = _after_failure(job, live, remaining, position, reason, skip, dead, outcome)
    for cand in job.candidates:  # shapes never reached by a candidate that failed to load
        load_failure = outcome.verdicts.get((cand.label, "*"))
        for shape_id in outcome.shape_ids(job.shape_ids):
            if shape_id in outcome.skipped:
                continue
            if load_failure and (cand.label, shape_id) not in outcome.verdicts:
                outcome.verdicts[(cand.label, shape_id)] = load_failure
    return outcome


def _after_failure(job, live, remaining, position, reason, skip, dead, outcome) -> list[str]:
    status, message = reason
    if position.stage == "load" and position.label is not None:
        dead.add(position.label)
        outcome.verdicts[(position.label, "*")] = _failure(status, message)
        return remaining
    if position.shape is None:
        # the judge died before it reached any candidate or shape: nothing can run
        for cand in live:
            outcome.verdicts.setdefault((cand.label, "*"), _failure(status, message))
            dead.add(cand.label)
        return remaining
    index = remaining.index(position.shape)
    if position.stage == "check" and position.label is not None:
        if not position.reported:
            outcome.verdicts[(position.label, position.shape)] = _failure(status, message)
        skip.setdefault(position.shape, []).append(position.label)
        return remaining[index:]
    failed_stage = "the reference" if position.stage == "reference" else "timing"
    for cand in live:
        key = (cand.label, position.shape)
        if position.stage == "reference" or outcome.verdicts.get(key, {}).get("status") == "pass":
            outcome.verdicts[key] = _failure(status, f"{failed_stage} failed: {message}")
    return remaining[index + 1:]


def _void(job: WorkerJob, live: list[CandidateRef], outcome: JobOutcome, why: str) -> None:
    """Another process wrote on the judge's channel: one of the contestants beside it (in
    container mode they share its file). Which one cannot be told, so no verdict of theirs
    stands, the ones already received included."""
    message = (f"a process other than the judge wrote on its result channel ({why}); only this "
               f"operator's contestants ran beside the judge, so none of their verdicts stands")
    for cand in live:
        outcome.verdicts[(cand.label, "*")] = _failure(Status.SUSPICIOUS, message)
        for shape_id in outcome.shape_ids(job.shape_ids):
            outcome.verdicts[(cand.label, shape_id)] = _failure(Status.SUSPICIOUS, message)
            outcome.timings.pop((cand.label, shape_id), None)


def _failure(status: Status, message: str) -> dict:
    kind = {Status.TIMEOUT: "timeout", Status.SUSPICIOUS: "protocol"}.get(status,
                                                                            "runtime_error")
    return {"status": status.value, "message": message, "max_abs_error": None,
            "max_rel_error": None, "own_share": None,
            "findings": [{"kind": kind, "message": message, "file": None, "line": None}]}


def _run_once(job, live, remaining, skip, scratch, outcome, on_progress, launcher):
    extra, hidden = _executor_paths("ATREX_EXECUTOR_WRITABLE"), \
        _executor_paths("ATREX_EXECUTOR_UNREADABLE")
    candidates = [{"label": c.label, "kernel": str(c.kernel), "root": str(c.root),
                   "role": c.role, "writable": [str(w) for w in c.writable] + extra,
                   "unreadable": hidden} for c in live]
    payload = {**job.__dict__, "candidates": candidates, "shape_ids": remaining, "skip": skip}
    mounts = sorted({c.root.resolve() for c in live} | {Path(job.op["dir"]).resolve()})
    oom_before = memory.oom_kills()
    handle = launcher.start(payload, scrubbed_env(job.device, job.device_index, scratch),
                            scratch, mounts, job.device, job.device_index)
    position = _Position()
    # The judge enforces `timeout_s` on every executor request itself; this deadline only catches
    # a judge that stops sending anything (its reference hangs, it is stuck), so it is longer.
    limit = judge_deadline_s(job.timeout_s)
    deadline = time.monotonic() + limit
    reason = None
    closed = False  # the judge sent its `done` (heartbeats may follow while executors stop)
    while True:
        wait = deadline - time.monotonic()
        if wait <= 0:
            handle.kill()
            reason = (Status.TIMEOUT, f"no result within {limit:g} s "
                      f"({_where(position)}); the judge was killed")
            break
        try:
            messages = handle.read_messages(min(wait, 1.0))
        except Tampered:
            handle.kill()
            handle.wait()
            raise
        if messages is None:
            break
        for message in messages:
            deadline = time.monotonic() + limit
            if message["type"] == "begin":
                outcome.add_stage(position, time.monotonic())
                position = _Position(message["shape"], message["label"], message["stage"])
                if on_progress:
                    on_progress(message["shape"], message["label"])
            _absorb(message, outcome, position)
            closed = closed or message["type"] == "done"
    outcome.add_stage(position, time.monotonic())  # the last stage ends with the judge
    code = handle.wait()
    outcome.log_tail = handle.log_tail()
    if reason is None and code == 0 and not closed:  # its last lines were cut
        raise Tampered("the judge exited without its closing message")
    if reason is None and code != 0:
        reason = (Status.RUNTIME_ERROR, f"the judge {_describe_end(handle, code, oom_before)} "
                  f"({_where(position)}){_log_excerpt(outcome.log_tail)}")
    return position, code if reason is None else (code or 1), reason


def _executor_paths(variable: str) -> list[str]:
    """Paths joined by ':' that widen or narrow every executor's Landlock rules: read here, in
    the evaluator, so a candidate cannot set them. ATREX_EXECUTOR_WRITABLE: where the operator
    lets every executor write besides its own directories (a GPU stack that writes somewhere the
    rules do not foresee). ATREX_EXECUTOR_UNREADABLE: files and directories no executor may
    read (the bot worker's secrets; bot/cli.py sets it)."""
    return [d for d in os.environ.get(variable, "").split(":") if d]


def judge_deadline_s(timeout_s: float) -> float:
    return 2 * timeout_s + 30


def _absorb(message: dict, outcome: JobOutcome, position: _Position) -> None:
    kind = message["type"]
    if kind == "format_error":
        outcome.format_error = {"path": message["path"], "field": message["field"],
                                "message": message["message"]}
    elif kind == "selected":
        outcome.selected = list(message["shapes"])
    elif kind == "skipped":
        outcome.skipped[message["shape"]] = message["message"]
    elif kind == "candidate_failed":
        outcome.verdicts[(message["label"], "*")] = message["verdict"]
    elif kind == "checked":
        outcome.verdicts[(message["label"], message["shape"])] = message["verdict"]
        if (message["label"], message["shape"]) == (position.label, position.shape):
            position.reported = True
    elif kind == "work":
        outcome.work[message["shape"]] = {k: v for k, v in message.items()
                                          if k not in ("type", "shape")}
    elif kind == "timed":
        for label, timing in message["results"].items():
            outcome.timings[(label, message["shape"])] = timing
    elif kind == "ready":
        outcome.landlock_abi = dict(message.get("landlock_abi", {}))
        outcome.hidden_paths = dict(message.get("hidden_paths", {}))
        outcome.add_stage(position, time.monotonic())  # the last executor's load
        position.stage, position.label = "ready", None


def _where(position: _Position) -> str:
    parts = [f"stage {position.stage}"]
    if position.shape is not None:
        parts.append(f"shape {position.shape}")
    if position.label is not None:
        parts.append(f"candidate {position.label}")
    return ", ".join(parts)


def _describe_end(handle, code: int, oom_before: int | None) -> str:
    if getattr(handle, "oom_killed", False):
        return "was killed by the kernel's OOM killer (the container's memory limit)"
    ended = getattr(handle, "ended", None) or memory.Exit(code)
    return memory.describe_exit(ended, oom_before)


def _log_excerpt(tail: str) -> str:
    lines = [line for line in tail.strip().splitlines() if line.strip()]
    return f": {lines[-1][:300]}" if lines else ""
