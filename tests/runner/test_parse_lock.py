"""Every parse of Python source in atrex goes through `atrex.runner.astscan.parse_source`.

CPython 3.11's AST converter keeps its recursion counter per interpreter, so two bot lanes calling
`ast.parse` at the same moment can fail a job with "AST constructor recursion depth mismatch" (it
did, once, in CI). `parse_source` holds a lock; a new direct call would bring the race back.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("atrex", "runner", "bot", "agent")


def _direct_parse_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "parse" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "ast"]


def test_no_direct_ast_parse_outside_parse_source():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "entries" in path.parts or path == ROOT / "runner" / "astscan.py":
                continue
            offenders += [f"{path.relative_to(ROOT)}:{line}" for line in _direct_parse_calls(path)]
    assert offenders == []

