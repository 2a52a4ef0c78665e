"""Settings of one optimization run, and the repository's ``[agent]`` table in atrex.toml.

``[agent]`` keys (all optional): proposers (list), max_iters, gpu_minutes, max_tokens, model,
base_url, target, dropout_after, autotune_batch, families (table op -> family). Unknown keys,
wrong types and out-of-range values are errors naming the field (``agent.<key>``). Command-line
flags override the table; the API key only ever comes from the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atrex.runner.errors import FormatError

from .decision import AcceptanceRule
from .proposers import LlmSettings


@dataclass
class OptimizeConfig:
    op: str
    proposers: list[str] = field(default_factory=lambda: ["autotune", "kb"])
    max_iters: int = 8
    gpu_minutes: float = 10.0
    max_tokens: int | None = 200_000
    target_fraction: float = 0.9
    dropout_after: int = 3
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda
    device_index: int = 0
    ncu: str = "auto"  # auto | off
    autotune_batch: int = 4
    timing_max_seconds: float | None = 10.0
    trials: int | None = None
    llm: LlmSettings | None = None
    rule: AcceptanceRule = field(default_factory=AcceptanceRule)
    kb_root: Path | None = None
    families: dict[str, str] = field(default_factory=dict)

    def check(self) -> None:
        if self.max_iters < 0:
            raise ValueError("--max-iters must be >= 0")
        if self.gpu_minutes <= 0:
            raise ValueError("--gpu-minutes must be > 0")
        if not 0 < self.target_fraction <= 1.5:
            raise ValueError("--target must be in (0, 1.5]")
        if self.dropout_after < 1:
            raise ValueError("--dropout-after must be >= 1")
        if "llm" in self.proposers and self.llm is None:
            raise ValueError("the llm proposer needs --model (and --base-url / OPENAI_API_KEY)")
        if self.ncu not in ("auto", "off"):
            raise ValueError("--ncu must be auto or off")


_AGENT_KEYS = {"proposers": list, "max_iters": int, "gpu_minutes": float, "max_tokens": int,
               "model": str, "base_url": str, "target": float, "dropout_after": int,
               "autotune_batch": int, "families": dict}


def agent_table(table: dict[str, Any], path: Path | None) -> dict[str, Any]:
    """The validated ``[agent]`` table (types checked, unknown keys rejected)."""
    where = path or "atrex.toml"
    result = {}
    for key, value in table.items():
        kind = _AGENT_KEYS.get(key)
        if kind is None:
            raise FormatError(where, f"agent.{key}",
                              f"unknown key (expected one of {', '.join(sorted(_AGENT_KEYS))})")
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise FormatError(where, f"agent.{key}",
                              f"must be of type {kind.__name__}, got {value!r}")
        if kind is list and not all(isinstance(v, str) for v in value):
            raise FormatError(where, f"agent.{key}", "must be a list of strings")
        if kind is dict and not all(isinstance(v, str) for v in value.values()):
            raise FormatError(where, f"agent.{key}", "must map operator names to family names")
        problem = _RANGES.get(key, lambda _v: None)(value)
        if problem:
            raise FormatError(where, f"agent.{key}", f"{problem}, got {value!r}")
        result[key] = value
    return result


def _proposers_problem(names: list[str]) -> str | None:
    from .proposers import KNOWN

    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        return f"unknown proposer {unknown[0]!r} (choose from {', '.join(KNOWN)})"
    if len(set(names)) != len(names):
        return "a proposer is listed twice"
    return None


_RANGES = {
    "proposers": _proposers_problem,
    "max_iters": lambda v: "must be >= 0" if v < 0 else None,
    "gpu_minutes": lambda v: "must be > 0" if v <= 0 else None,
    "max_tokens": lambda v: "must be >= 0" if v < 0 else None,
    "target": lambda v: "must be in (0, 1.5]" if not 0 < v <= 1.5 else None,
    "dropout_after": lambda v: "must be >= 1" if v < 1 else None,
    "autotune_batch": lambda v: "must be >= 1" if v < 1 else None,
}
