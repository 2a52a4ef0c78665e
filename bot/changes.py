"""Which operators a pull request touches.

An operator is affected when a changed file lies in its directory, or is a repository file its
kernel imports (directly or through other repository modules), at head or at the merge base (so a
helper deleted by the PR still counts). A change to `atrex.toml` affects every operator: thresholds
and tolerances apply to all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from atrex.runner import astscan
from atrex.runner.config import CONFIG_NAME
from atrex.runner.repo import RepoSpec


@dataclass
class Changes:
    ops: list[str]  # affected operators present at head, in repository order
    rel_dirs: dict[str, str]  # op name -> directory relative to the repository root
    removed: list[str] = field(default_factory=list)  # op directories deleted by the PR


def kernel_closure(kernel: Path, root: Path) -> set[Path]:
    """The kernel file and every repository module it imports, transitively."""
    root = root.resolve()
    seen: set[Path] = set()
    queue = [kernel.resolve()]
    while queue:
        path = queue.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        queue.extend(astscan.local_imports(path, root))
    return seen


def _rel(paths: set[Path], root: Path) -> set[str]:
    root = root.resolve()
    return {str(p.relative_to(root)) for p in paths if root in p.parents}


def _inside(path: str, directory: str) -> bool:
    if directory in ("", "."):
        return True
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def affected_ops(head: RepoSpec, base_root: Path, changed: list[str]) -> Changes:
    rel_dirs = {op.name: str(Path(op.dir).resolve().relative_to(head.root)) for op in head.ops}
    changed_set = set(changed)
    everything = CONFIG_NAME in changed_set
    ops = []
    for op in head.ops:
        rel = rel_dirs[op.name]
        files = _rel(kernel_closure(Path(op.dir) / op.kernel_file, head.root), head.root)
        base_kernel = base_root / rel / op.kernel_file
        if base_kernel.is_file():
            files |= _rel(kernel_closure(base_kernel, base_root), base_root)
        if everything or changed_set & files or any(_inside(p, rel) for p in changed):
            ops.append(op.name)
    removed = sorted({str(Path(p).parent) for p in changed
                      if Path(p).name == "reference.py" and (base_root / p).is_file()
                      and not (head.root / p).is_file()})
    return Changes(ops=ops, rel_dirs=rel_dirs, removed=removed)
