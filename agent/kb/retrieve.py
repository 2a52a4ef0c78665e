"""Ranking knowledge-base entries for one operator and its current bottleneck.

Score = family (exact 3, "any" 1; no match: not eligible) + bottleneck (match 3) + dtype (match 1,
"any" 0.5, mismatch -1) + GPU (match 1, "any" 0.5, mismatch -0.5). Kernel entries are eligible only
for their exact family and, when the operator's forward signature is known, the same parameter
names in the same order; a kernel for another signature could not be dropped in.
"""

from __future__ import annotations

from dataclasses import dataclass

from atrex.runner.dtypes import canonical_dtype

from .loader import KbEntry

ANY = "any"


@dataclass(frozen=True)
class Retrieval:
    entry: KbEntry
    score: float
    why: tuple[str, ...]


def family_of(op_name: str, entries: list[KbEntry],
              overrides: dict[str, str] | None = None) -> str | None:
    """The operator family: an explicit override, else the longest known family in the name."""
    if overrides and op_name in overrides:
        return overrides[op_name]
    name = _squash(op_name)
    families = sorted({f for e in entries for f in e.families if f != ANY}, key=len, reverse=True)
    for family in families:
        if _squash(family) == name:
            return family
    for family in families:
        if _squash(family) in name:
            return family
    return None


def _squash(name: str) -> str:
    return "".join(c for c in name.lower() if c.isalnum())


def retrieve(entries: list[KbEntry], family: str | None, dtype: str | None, gpu: str | None,
             bottleneck: str | None, forward: list[str] | None = None, kind: str | None = None,
             limit: int = 4) -> list[Retrieval]:
    ranked = []
    for entry in entries:
        if kind is not None and entry.kind != kind:
            continue
        scored = _score(entry, family, dtype, gpu, bottleneck, forward)
        if scored is not None:
            ranked.append(scored)
    ranked.sort(key=lambda r: (-r.score, r.entry.id))
    return ranked[:limit]


def _score(entry: KbEntry, family, dtype, gpu, bottleneck, forward) -> Retrieval | None:
    why = []
    if family is not None and family in entry.families:
        score = 3.0
        why.append(f"family {family}")
    elif ANY in entry.families and entry.kind == "note":
        score = 1.0
        why.append("any family")
    else:
        return None
    if entry.kind == "kernel" and forward is not None and tuple(forward) != entry.forward:
        return None
    if bottleneck is not None and bottleneck in entry.bottlenecks:
        score += 3.0
        why.append(f"bottleneck {bottleneck}")
    score += _match(entry.dtypes, _dtype(dtype), "dtype", why, canonical=True)
    score += _match(entry.gpus, gpu, "gpu", why, mismatch=-0.5)
    return Retrieval(entry, score, tuple(why))


def _match(values, wanted, what, why, canonical=False, mismatch=-1.0) -> float:
    if wanted is None:
        return 0.0
    names = {_dtype(v) for v in values} if canonical else set(values)
    if wanted in names:
        why.append(f"{what} {wanted}")
        return 1.0
    if ANY in values:
        return 0.5
    return mismatch


def _dtype(name: str | None) -> str | None:
    if name is None or name == ANY:
        return name
    return canonical_dtype(name) or name
