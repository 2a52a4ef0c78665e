"""The trust boundary is visible in the tree: the executor (the only code beside an untrusted
kernel) imports nothing of the runner but the message contract, and the judge never imports a
candidate."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXECUTOR = ROOT / "runner" / "executor"
CONTRACT = ROOT / "runner" / "contract"


def _runner_imports(path: Path) -> set[str]:
    """Modules of `atrex.runner` a file imports (relative imports resolved)."""
    package = ".".join(["atrex", *path.relative_to(ROOT).with_suffix("").parts[:-1]])
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
    return {name for name in found
            if name == "atrex.runner" or name.startswith("atrex.runner.")}


def test_executor_imports_only_itself_and_the_contract():
    for path in EXECUTOR.rglob("*.py"):
        outside = {m for m in _runner_imports(path)
                   if not m.startswith(("atrex.runner.executor", "atrex.runner.contract"))}
        assert not outside, f"{path.name} imports {outside}"


def test_contract_imports_nothing_else_of_the_runner():
    for path in CONTRACT.rglob("*.py"):
        outside = {m for m in _runner_imports(path) if not m.startswith("atrex.runner.contract")}
        assert not outside, f"{path.name} imports {outside}"


def test_judge_never_imports_candidate_code():
    """The judge loads reference.py and input.py by path; it has no loader for kernel files, and
    nothing in it imports the executor's session (where the candidate's module lives)."""
    for path in (ROOT / "runner" / "judge").rglob("*.py"):
        source = path.read_text()
        assert "kernel_file" not in source and "atrex_candidate" not in source, path.name
        allowed = {"atrex.runner.executor.devmap"}  # the cuda -> cpu device mapping, no candidate
        executor = {m for m in _runner_imports(path) if m.startswith("atrex.runner.executor")}
        assert executor <= allowed, f"{path.name} imports {executor - allowed}"
