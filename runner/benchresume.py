"""`atrex bench --resume`: continue a bench run that a device lease or a deadline cut short.

Beside its --json document a bench run keeps every contestant's full report, rewritten after
every operator (`<name>.reports.json`). A resumed run reads those reports, runs only the
operators that some contestant has not finished, and writes one document over both: weights
renormalized over every operator, `sessions` saying what each part ran and when. It refuses,
before running anything, to mix machines or software (GPU, driver, CUDA, torch, Triton,
Python), contestants or compile modes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ResumeError
from .evaluate import build_report
from .keep import write_atomic
from .model import DeviceInfo, Report
from .repo import RepoSpec

STATE_KIND = "atrex-bench-state"
_IDENTITY = ("kind", "name", "gpu_key", "driver", "cuda", "torch", "triton", "python")


def state_path(json_path: Path) -> Path:
    return Path(json_path).with_suffix(".reports.json")


@dataclass
class BenchState:
    """What a bench run has finished so far: every contestant's report, and its parts."""

    baselines: list[str]
    compile_mode: str
    reports: dict[str, Report] = field(default_factory=dict)
    sessions: list[dict] = field(default_factory=list)  # {"started_at", "ops"} per part

    def finished_ops(self) -> set[str]:
        """Operators every contestant of the earlier parts finished."""
        names = [{op.name for op in r.ops if op.format_error is None}
                 for r in self.reports.values()]
        return set.intersection(*names) if names else set()

    def to_json(self) -> str:
        return json.dumps({"kind": STATE_KIND, "baselines": self.baselines,
                           "compile_mode": self.compile_mode, "sessions": self.sessions,
                           "reports": {k: r.to_dict() for k, r in self.reports.items()}}) + "\n"


def load_state(path: Path, baselines: list[str], compile_mode: str) -> BenchState:
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ResumeError(f"{path}: cannot read the saved reports ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ResumeError(f"{path}: not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict) or data.get("kind") != STATE_KIND:
        raise ResumeError(f"{path}: field kind: not an atrex bench state file")
    for name, now in (("baselines", baselines), ("compile_mode", compile_mode)):
        if data.get(name) != now:
            raise ResumeError(f"{path}: field {name}: the run being resumed used "
                              f"{data.get(name)!r}, this one {now!r}")
    try:
        reports = {label: Report.from_dict(doc) for label, doc in data["reports"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ResumeError(f"{path}: field reports: {exc}") from None
    return BenchState(baselines, compile_mode, reports, list(data.get("sessions") or []))


def check_same_machine(state: BenchState, now: DeviceInfo) -> None:
    """The earlier parts and this one measured on the same kind of GPU with the same software."""
    if not state.reports:
        return
    then = next(iter(state.reports.values())).device
    differ = [f"{key} {getattr(then, key)!r} then, {getattr(now, key)!r} now"
              for key in _IDENTITY if getattr(then, key) != getattr(now, key)]
    if differ:
        raise ResumeError("cannot resume this bench run on another machine or software: "
                          + "; ".join(differ))


def merged(state: BenchState, fresh: dict[str, Report], repo: RepoSpec) -> dict[str, Report]:
    """One report per contestant over the earlier parts' operators and this part's (this part's
    result wins for an operator both hold), weights renormalized over all of them."""
    order = {op.name: i for i, op in enumerate(repo.ops)}
    out = {}
    # a contestant this part did not run (a library peer only the earlier operators have) keeps
    # its earlier results
    for label in dict.fromkeys([*state.reports, *fresh]):
        before, now = state.reports.get(label), fresh.get(label)
        ran = {op.name for op in now.ops} if now else set()
        ops = [op for op in (before.ops if before else []) if op.name not in ran]
        ops = sorted(ops + (now.ops if now else []), key=lambda op: order.get(op.name, len(order)))
        latest = now or before
        notes = list(dict.fromkeys([*(before.notes if before else []), *latest.notes]))
        rebuilt = build_report(latest.device, ops, repo, notes, latest.timing_available)
        rebuilt.created_at = (before or now).created_at
        out[label] = rebuilt
    return out


@dataclass
class Keeper:
    """Keeps a bench run's state file current: the earlier parts' reports merged with this
    part's after every operator, and this part named in `sessions`."""

    repo: RepoSpec
    earlier: BenchState
    path: Path | None  # None: nothing is kept (no --json file)
    started_at: str

    def merge(self, fresh: dict[str, Report]) -> dict[str, Report]:
        return merged(self.earlier, fresh, self.repo) if self.earlier.reports else fresh

    def keep(self, fresh: dict[str, Report]) -> dict[str, Report]:
        """`fresh` merged with the earlier parts; written to the state file when there is one."""
        if self.earlier.reports and fresh:
            check_same_machine(self.earlier, next(iter(fresh.values())).device)
        reports = self.merge(fresh)
        if self.path is not None:
            state = BenchState(self.earlier.baselines, self.earlier.compile_mode, reports,
                               self.parts(fresh))
            write_atomic(self.path, state.to_json())
        return reports

    def parts(self, fresh: dict[str, Report]) -> list[dict]:
        """The earlier parts and this one: when each started, the operators it ran and the
        card it ran them on (a GPU's UUID: a resumed run may get another card of the model)."""
        report = next(iter(fresh.values()), None)
        part = {"started_at": self.started_at, "ops": [op.name for op in report.ops]
                if report else []}
        if report is not None and report.device.uuid:
            part["gpu_uuid"] = report.device.uuid
        return [*self.earlier.sessions, part]
