"""Every parse of Python source in atrex goes through `runner.astscan.parse_source`.

CPython 3.11's AST converter keeps its recursion counter per interpreter, so two bot lanes calling
`ast.parse` at the same moment can fail a job with "AST constructor recursion depth mismatch" (it
did, once, in CI). `parse_source` holds a lock; a new direct call would bring the race back.
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from runner.astscan import parse_source

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


def test_parse_source_from_many_threads():
    source = "\n".join(f"def f{i}(a, b=[1, [2, [3]]]):\n    return {{'k': (a, b)}}"
                       for i in range(50))
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(20):
                assert len(parse_source(source).body) == 50
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
