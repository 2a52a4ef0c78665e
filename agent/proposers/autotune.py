"""``autotune``: search a kernel's launch constants without an LLM.

Tunables are found with ``ast``: module-level integer constants whose names say what they are
(``BLOCK_SIZE``, ``NUM_WARPS``, ``NUM_STAGES``, ``GROUP_M``, ``ROWS_PER_PROGRAM``,
``TILE_ELEMS``...) and integer literals passed to a kernel launch ``kernel[grid](..., num_warps=4,
BLOCK=128)``. Each round is a neighbourhood of the incumbent (one constant, or a block size
together with the warp count, moved one or two steps along its domain), ordered by what the
bottleneck class suggests, skipping settings already measured against this incumbent. The literals
are rewritten in place in the source (byte offsets from the AST), so comments and formatting
survive.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from atrex.runner.astscan import parse_source

from .base import Proposal, ProposalContext

_POW2 = [2**i for i in range(0, 17)]
DOMAINS = {
    "warps": [1, 2, 4, 8, 16, 32],
    "stages": [1, 2, 3, 4, 5, 6],
    "group": [1, 2, 4, 8, 16, 32],
    "rows": [1, 2, 4, 8, 16, 32, 64],
    "block": [v for v in _POW2 if 16 <= v <= 65536],
    "split": [1, 2, 4, 8, 16, 32, 64],
}
# First match wins; names are matched case-sensitively on the constant or keyword name.
_KIND_PATTERNS = (
    (re.compile(r"^num_warps$|WARPS$"), "warps"),
    (re.compile(r"^num_stages$|STAGES$"), "stages"),
    (re.compile(r"GROUP"), "group"),
    (re.compile(r"ROWS|PER_PROGRAM"), "rows"),
    (re.compile(r"BLOCK|TILE|ELEMS"), "block"),
    (re.compile(r"SPLIT|CHUNK"), "split"),
)
# Prior for moving a kind up (+) or down (-) given the bottleneck class.
_PRIOR = {
    "latency": {"block+": 3, "warps+": 3, "rows+": 3, "split+": 2, "stages+": 1},
    "occupancy": {"warps+": 3, "block-": 2, "rows-": 2, "stages-": 1.5, "block+": 1},
    "memory": {"block+": 2.5, "warps+": 2, "rows+": 2, "stages+": 1.5, "block-": 1, "warps-": 1},
    "compute": {"stages+": 3, "block+": 2, "block-": 2, "warps+": 2, "group+": 2, "warps-": 1},
}
_DEFAULT_PRIOR = {"+": 1.0, "-": 0.5}


@dataclass(frozen=True)
class Tunable:
    key: str  # unique: the constant's name, or keyword@kernel for launch literals
    kind: str
    value: int
    span: tuple[int, int, int, int]  # lineno, col, end_lineno, end_col of the literal


@dataclass(frozen=True)
class Change:
    settings: tuple[tuple[str, int, int], ...]  # (key, old, new)
    score: float

    def summary(self) -> str:
        return ", ".join(f"{key} {old}->{new}" for key, old, new in self.settings)

    def canonical(self) -> str:
        return ";".join(f"{key}={new}" for key, _, new in sorted(self.settings))


def kind_of(name: str) -> str | None:
    for pattern, kind in _KIND_PATTERNS:
        if pattern.search(name):
            return kind
    return None


def find_tunables(source: str) -> list[Tunable]:
    tree = parse_source(source)
    found = _module_constants(tree) + _launch_literals(tree)
    return [t for t in found if t.value in DOMAINS[t.kind]]


def _module_constants(tree: ast.Module) -> list[Tunable]:
    assigned: dict[str, list[ast.AST]] = {}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else [])
        for target in targets:
            if isinstance(target, ast.Name):
                assigned.setdefault(target.id, []).append(node.value)
    result = []
    for name, values in assigned.items():
        kind = kind_of(name)
        if kind is None or len(values) != 1 or not _is_int(values[0]):
            continue
        result.append(Tunable(name, kind, values[0].value, _span(values[0])))
    return result


def _launch_literals(tree: ast.Module) -> list[Tunable]:
    result = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue
        kernel = ast.unparse(node.func.value)
        for keyword in node.keywords:
            kind = kind_of(keyword.arg or "")
            if kind is not None and _is_int(keyword.value):
                key = f"{keyword.arg}@{kernel}:{keyword.value.lineno}"
                result.append(Tunable(key, kind, keyword.value.value, _span(keyword.value)))
    return result


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    return (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)


def apply_settings(source: str, tunables: list[Tunable], values: dict[str, int]) -> str:
    """The source with the given tunables' literals replaced (byte offsets, back to front)."""
    data = source.encode()
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    edits = []
    for tunable in tunables:
        if tunable.key in values:
            line, col, end_line, end_col = tunable.span
            edits.append((starts[line - 1] + col, starts[end_line - 1] + end_col,
                          str(values[tunable.key]).encode()))
    for begin, end, text in sorted(edits, reverse=True):
        data = data[:begin] + text + data[end:]
    return data.decode()


def _steps(tunable: Tunable) -> list[tuple[int, int]]:
    """(new value, signed steps) one or two steps away along the tunable's domain."""
    domain = DOMAINS[tunable.kind]
    index = domain.index(tunable.value)
    result = []
    for step in (1, 2, -1, -2):
        if 0 <= index + step < len(domain):
            result.append((domain[index + step], step))
    return result


def _prior(kind: str, step: int, bottleneck: str) -> float:
    sign = "+" if step > 0 else "-"
    return _PRIOR.get(bottleneck, {}).get(kind + sign, _DEFAULT_PRIOR[sign])


def neighbourhood(tunables: list[Tunable], bottleneck: str) -> list[Change]:
    changes = []
    for tunable in tunables:
        for new, step in _steps(tunable):
            score = _prior(tunable.kind, step, bottleneck) + (0.25 if abs(step) == 2 else 0.0)
            changes.append(Change(((tunable.key, tunable.value, new),), score))
    blocks = [t for t in tunables if t.kind in ("block", "rows")]
    warps = [t for t in tunables if t.kind == "warps"]
    for block in blocks:
        for warp in warps:
            for step in (1, 2, -1):
                pair = _coupled(block, warp, step)
                if pair is not None:
                    score = max(_prior(block.kind, step, bottleneck),
                                _prior("warps", step, bottleneck)) + 1.0 + (
                                    0.25 if abs(step) == 2 else 0.0)
                    changes.append(Change(pair, score))
    changes.sort(key=lambda c: (-c.score, c.canonical()))
    return changes


def _coupled(block: Tunable, warp: Tunable, step: int):
    moves = []
    for tunable in (block, warp):
        domain = DOMAINS[tunable.kind]
        index = domain.index(tunable.value) + step
        if not 0 <= index < len(domain):
            return None
        moves.append((tunable.key, tunable.value, domain[index]))
    return tuple(moves)


class AutotuneProposer:
    name = "autotune"

    def __init__(self, batch: int = 4):
        self.batch = max(1, batch)

    def propose(self, ctx: ProposalContext) -> list[Proposal] | None:
        try:
            tunables = find_tunables(ctx.incumbent_source)
        except SyntaxError:
            return None
        if not tunables:
            return None
        tried = {item.meta.get("autotune") for item in ctx.memory
                 if item.incumbent_sha == ctx.incumbent_sha and item.proposer == self.name}
        proposals = []
        for change in neighbourhood(tunables, ctx.profile.bottleneck):
            if change.canonical() in tried:
                continue
            values = {key: new for key, _, new in change.settings}
            source = apply_settings(ctx.incumbent_source, tunables, values)
            proposals.append(Proposal(
                proposer=self.name, source=source,
                summary=f"autotune ({ctx.profile.bottleneck}): {change.summary()}",
                meta={"autotune": change.canonical()}))
            if len(proposals) >= self.batch:
                break
        return proposals or None
