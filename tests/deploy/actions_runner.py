"""Running a composite action's steps locally, the way a GitHub Actions runner does.

Enough of the runner for action.yml: inputs with defaults, `${{ }}` expressions over the `inputs`,
`github` (with the event from GITHUB_EVENT_PATH) and `steps` contexts, `if:` conditions (`==`,
`!=`, `&&`, `||`, `!`, `always()`, `success()`, `failure()`), `run:` steps under
`bash --noprofile --norc -eo pipefail` with their `env:` and a fresh GITHUB_OUTPUT file each, and
the job's GITHUB_STEP_SUMMARY. A `uses:` step is recorded with its resolved `with:`; for
actions/upload-artifact the files its `path:` names are copied to `artifacts/<name>/`, as the
upload would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)"
                    r"|(?P<op>==|!=|&&|\|\||!|\(|\))"
                    r"|(?P<name>[A-Za-z_][\w-]*(?:\.[\w-]+|\.\*|\[\d+\])*))")


@dataclass
class StepResult:
    name: str
    ran: bool
    outcome: str = "skipped"  # success, failure, skipped
    outputs: dict[str, str] = field(default_factory=dict)
    output: str = ""
    uses: str | None = None
    with_: dict[str, str] = field(default_factory=dict)


@dataclass
class JobResult:
    steps: list[StepResult]
    summary: str
    artifacts: Path

    @property
    def failed(self) -> bool:
        return any(s.outcome == "failure" for s in self.steps)

    def step(self, name_part: str) -> StepResult:
        return next(s for s in self.steps if name_part in s.name)


class ActionRunner:
    def __init__(self, action_dir: Path, work: Path, runs: Path, env: dict[str, str],
                 event_name: str, event: dict, repository: str, token: str):
        self.action_dir, self.work, self.runs = action_dir, work, runs
        self.action = yaml.safe_load((action_dir / "action.yml").read_text())
        self.base_env, self.event_name, self.event = env, event_name, event
        self.repository, self.token = repository, token

    def run(self, inputs: dict[str, str], run_id: int = 1) -> JobResult:
        base = self.runs / f"run{run_id}"
        temp, artifacts = base / "runner-temp", base / "artifacts"
        for d in (temp, artifacts):
            d.mkdir(parents=True)
        event_path, summary = base / "event.json", base / "step-summary.md"
        event_path.write_text(json.dumps(self.event))
        summary.write_text("")
        ctx = {"inputs": self._inputs(inputs), "steps": {},
               "github": {"event": self.event, "event_name": self.event_name,
                          "repository": self.repository, "token": self.token,
                          "run_id": str(run_id)}}
        env = {**self.base_env, "GITHUB_ACTIONS": "true", "CI": "true",
               "GITHUB_EVENT_NAME": self.event_name, "GITHUB_EVENT_PATH": str(event_path),
               "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_REPOSITORY": self.repository,
               "GITHUB_ACTION_PATH": str(self.action_dir), "GITHUB_RUN_ID": str(run_id),
               "RUNNER_TEMP": str(temp), "GITHUB_WORKSPACE": str(self.work)}
        results: list[StepResult] = []
        for index, step in enumerate(self.action["runs"]["steps"]):
            results.append(self._step(step, index, ctx, env, results, base, artifacts))
        return JobResult(results, summary.read_text(), artifacts)

    def _inputs(self, given: dict[str, str]) -> dict[str, str]:
        unknown = set(given) - set(self.action["inputs"])
        assert not unknown, f"inputs not declared in action.yml: {unknown}"
        values = {}
        for name, spec in self.action["inputs"].items():
            values[name] = given.get(name, str(spec.get("default", "")))
        return {k: self.interpolate(v, {"github": {"token": self.token}}) for k, v in
                values.items()}

    def _step(self, step: dict, index: int, ctx: dict, env: dict, done: list[StepResult],
              base: Path, artifacts: Path) -> StepResult:
        name = step.get("name") or step.get("uses") or f"step {index}"
        failed_before = any(r.outcome == "failure" for r in done)
        condition = step.get("if", "success()")
        if not self.evaluate(condition, ctx, failed_before):
            return done_result(ctx, step, StepResult(name, False))
        step_env = {k: self.interpolate(str(v), ctx) for k, v in (step.get("env") or {}).items()}
        if "uses" in step:
            with_ = {k: self.interpolate(str(v), ctx) for k, v in (step.get("with") or {}).items()}
            result = StepResult(name, True, "success", uses=step["uses"], with_=with_)
            if step["uses"].startswith("actions/upload-artifact@"):
                _upload(with_, artifacts)
            return done_result(ctx, step, result)
        out_file = base / f"output-{index}.txt"
        out_file.write_text("")
        script = base / f"step-{index}.sh"
        script.write_text(step["run"])
        proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                              env={**env, **step_env, "GITHUB_OUTPUT": str(out_file)},
                              cwd=self.work, capture_output=True, text=True, timeout=900)
        result = StepResult(name, True, "success" if proc.returncode == 0 else "failure",
                            outputs=parse_output_file(out_file.read_text()),
                            output=proc.stdout + proc.stderr)
        return done_result(ctx, step, result)

    # --- expressions -----------------------------------------------------------------------

    def interpolate(self, text: str, ctx: dict) -> str:
        def one(match: re.Match) -> str:
            value = self._eval(match.group(1), ctx, False)
            if isinstance(value, bool):
                return "true" if value else "false"
            return "" if value is None else str(value)

        return re.sub(r"\$\{\{\s*(.*?)\s*\}\}", one, text)

    def evaluate(self, condition: str, ctx: dict, failed_before: bool) -> bool:
        expr = condition.strip()
        if expr.startswith("${{") and expr.endswith("}}"):
            expr = expr[3:-2]
        uses_status = re.search(r"\b(always|success|failure|cancelled)\(\)", expr)
        value = self._eval(expr, ctx, failed_before)
        if not uses_status:  # GitHub adds success() && to a condition without a status check
            return bool(value) and not failed_before
        return bool(value)

    def _eval(self, expr: str, ctx: dict, failed_before: bool) -> Any:
        parts, pos = [], 0
        names = {}
        expr = expr.strip()
        while pos < len(expr):
            match = _TOKEN.match(expr, pos)
            if match is None or match.end() == pos:
                raise ValueError(f"cannot parse expression {expr!r} at {pos}")
            pos = match.end()
            if match.group("str") is not None:
                parts.append(repr(match.group("str")[1:-1].replace("''", "'")))
            elif match.group("num") is not None:
                parts.append(match.group("num"))
            elif match.group("op") is not None:
                parts.append({"&&": " and ", "||": " or ", "!": " not "}.get(
                    match.group("op"), match.group("op")))
            else:
                name = match.group("name")
                if expr[pos:pos + 2] == "()":
                    pos += 2
                    parts.append(repr({"always": True, "success": not failed_before,
                                       "failure": failed_before, "cancelled": False}[name]))
                elif name in ("true", "false", "null"):
                    parts.append({"true": "True", "false": "False", "null": "None"}[name])
                else:
                    key = f"_v{len(names)}"
                    names[key] = _Loose(lookup(ctx, name))
                    parts.append(key)
        value = eval("".join(parts), {"__builtins__": {}}, names)  # noqa: S307 - test helper
        return value.value if isinstance(value, _Loose) else value


class _Loose:
    """GitHub's loose equality: null equals '', strings compare case-insensitively."""

    def __init__(self, value: Any):
        self.value = value

    def _norm(self, other: Any) -> tuple[Any, Any]:
        other = other.value if isinstance(other, _Loose) else other
        a, b = self.value, other
        if a is None:
            a = ""
        if b is None:
            b = ""
        if isinstance(a, str | int | float) and isinstance(b, str | int | float):
            return str(a).lower(), str(b).lower()
        return a, b

    def __eq__(self, other: Any) -> bool:
        a, b = self._norm(other)
        return a == b

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __bool__(self) -> bool:
        return bool(self.value)

    __hash__ = None


def lookup(ctx: dict, path: str) -> Any:
    value: Any = ctx
    for key in re.findall(r"[\w-]+", path):
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None
    return value


def done_result(ctx: dict, step: dict, result: StepResult) -> StepResult:
    if "id" in step:
        ctx["steps"][step["id"]] = {"outputs": result.outputs, "outcome": result.outcome}
    return result


def parse_output_file(text: str) -> dict[str, str]:
    """GITHUB_OUTPUT: `key=value` lines and `key<<DELIM ... DELIM` blocks."""
    outputs, lines, i = {}, text.splitlines(), 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            key, delim = line.split("<<", 1)
            end = lines.index(delim, i + 1)
            outputs[key] = "\n".join(lines[i + 1:end])
            i = end + 1
            continue
        if "=" in line:
            key, value = line.split("=", 1)
            outputs[key] = value
        i += 1
    return outputs


def _upload(with_: dict[str, str], artifacts: Path) -> None:
    dest = artifacts / with_.get("name", "artifact")
    dest.mkdir(parents=True, exist_ok=True)
    for line in with_["path"].splitlines():
        path = Path(line.strip())
        if line.strip() and path.is_file():
            shutil.copy(path, dest / path.name)


def process_env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if not k.startswith(("GITHUB_", "ATREX_", "RUNNER_"))}
    return {**keep, **extra}
