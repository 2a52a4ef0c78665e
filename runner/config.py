"""`atrex.toml`: the repository's configuration, validated field by field.

Only the sections the runner acts on are typed here; `[agent]` and `[schedule]` are kept as plain
tables for the agent and the bot to validate, so the runner does not depend on them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FormatError

CONFIG_NAME = "atrex.toml"


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    rel_l2: float  # bound on ||out - ref|| / ||ref||; catches outputs of the wrong magnitude


# bf16/fp16 follow Atrex-Bench (atol 1e-2, rtol 5e-2); the relative-L2 bound stops a near-zero
# output from passing on small-magnitude results (softmax rows, attention probabilities).
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "bfloat16": Tolerance(atol=1e-2, rtol=5e-2, rel_l2=2e-2),
    "float16": Tolerance(atol=1e-2, rtol=5e-2, rel_l2=1e-2),
    "float32": Tolerance(atol=1e-3, rtol=1e-3, rel_l2=1e-3),
    "float64": Tolerance(atol=1e-7, rtol=1e-7, rel_l2=1e-7),
    "float8_e4m3fn": Tolerance(atol=2e-2, rtol=0.13, rel_l2=0.1),
    "float8_e5m2": Tolerance(atol=4e-2, rtol=0.26, rel_l2=0.2),
    # the fnuz variants (AMD's encodings) have the same mantissa widths as their fn siblings
    "float8_e4m3fnuz": Tolerance(atol=2e-2, rtol=0.13, rel_l2=0.1),
    "float8_e5m2fnuz": Tolerance(atol=4e-2, rtol=0.26, rel_l2=0.2),
}

REFERENCE_DTYPES = ("float64", "float32", "native")


@dataclass(frozen=True)
class OpOverrides:
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    reference_dtype: str | None = None
    weight: float | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class RepoConfig:
    path: Path | None  # the atrex.toml this came from, None for defaults
    ops_root: str = "."
    gpu: str = "h200_sxm"
    trials: int = 3
    own_kernel_share: float = 0.9
    regression: float = 0.05
    timeout_s: float = 300.0
    reference_dtype: str = "float64"
    tolerances: dict[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    ops: dict[str, OpOverrides] = field(default_factory=dict)
    agent: dict[str, Any] = field(default_factory=dict)
    schedule: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, Any] = field(default_factory=dict)  # validated by runner/weights.py

    def tolerance(self, op: str, dtype: str) -> Tolerance | None:
        override = self.ops.get(op)
        if override and dtype in override.tolerances:
            return override.tolerances[dtype]
        return self.tolerances.get(dtype)

    def reference_dtype_for(self, op: str) -> str:
        override = self.ops.get(op)
        return (override and override.reference_dtype) or self.reference_dtype

    def timeout_for(self, op: str) -> float:
        override = self.ops.get(op)
        return (override and override.timeout_s) or self.timeout_s


_TOP_LEVEL = {"repo", "thresholds", "tolerances", "ops", "agent", "schedule", "weights"}


def load_config(root: Path) -> RepoConfig:
    path = root / CONFIG_NAME
    if not path.is_file():
        return RepoConfig(path=None)
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(path, None, f"not valid TOML: {exc}") from None
    _reject_unknown(path, "", data, _TOP_LEVEL)
    repo = _table(path, "repo", data, {"ops_root", "gpu"})
    thresholds = _table(
        path, "thresholds", data,
        {"trials", "own_kernel_share", "regression", "timeout_s", "reference_dtype"})
    tolerances = dict(DEFAULT_TOLERANCES)
    tolerances.update(_tolerances(path, "tolerances", data.get("tolerances", {})))
    return RepoConfig(
        path=path,
        ops_root=_get(path, "repo.ops_root", repo, "ops_root", str, "."),
        gpu=_get(path, "repo.gpu", repo, "gpu", str, "h200_sxm"),
        trials=_get(path, "thresholds.trials", thresholds, "trials", int, 3, minimum=1),
        own_kernel_share=_fraction(path, "thresholds.own_kernel_share", thresholds,
                                   "own_kernel_share", 0.9),
        regression=_fraction(path, "thresholds.regression", thresholds, "regression", 0.05),
        timeout_s=_get(path, "thresholds.timeout_s", thresholds, "timeout_s", float, 300.0,
                       minimum=1),
        reference_dtype=_reference_dtype(path, "thresholds.reference_dtype",
                                         thresholds.get("reference_dtype", "float64")),
        tolerances=tolerances,
        ops=_op_overrides(path, data.get("ops", {})),
        agent=_table(path, "agent", data, None),
        schedule=_table(path, "schedule", data, None),
        weights=_table(path, "weights", data, None),
    )


def _table(path: Path, name: str, data: dict, allowed: set[str] | None) -> dict:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise FormatError(path, name, "must be a table")
    if allowed is not None:
        _reject_unknown(path, name + ".", value, allowed)
    return value


def _reject_unknown(path: Path, prefix: str, table: dict, allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            raise FormatError(path, prefix + key,
                              f"unknown key (expected one of {', '.join(sorted(allowed))})")


def _get(path, field_name, table, key, kind, default, minimum=None):
    if key not in table:
        return default
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise FormatError(path, field_name, f"must be a {kind.__name__}, got {value!r}")
    if minimum is not None and value < minimum:
        raise FormatError(path, field_name, f"must be >= {minimum}, got {value!r}")
    return value


def _fraction(path, field_name, table, key, default) -> float:
    value = _get(path, field_name, table, key, float, default)
    if not 0.0 <= value <= 1.0:
        raise FormatError(path, field_name, f"must be between 0 and 1, got {value!r}")
    return value


def _reference_dtype(path, field_name, value) -> str:
    if value not in REFERENCE_DTYPES:
        raise FormatError(path, field_name,
                          f"must be one of {', '.join(REFERENCE_DTYPES)}, got {value!r}")
    return value


def _tolerances(path: Path, prefix: str, table: Any) -> dict[str, Tolerance]:
    from .dtypes import canonical_dtype

    if not isinstance(table, dict):
        raise FormatError(path, prefix, "must be a table of dtype = {atol, rtol}")
    result = {}
    for name, entry in table.items():
        where = f"{prefix}.{name}"
        dtype = canonical_dtype(name)
        if dtype is None:
            raise FormatError(path, where, f"unknown dtype {name!r}")
        if not isinstance(entry, dict):
            raise FormatError(path, where, "must be a table {atol, rtol, rel_l2}")
        _reject_unknown(path, where + ".", entry, {"atol", "rtol", "rel_l2"})
        base = DEFAULT_TOLERANCES.get(dtype, Tolerance(0.0, 0.0, 0.0))
        result[dtype] = Tolerance(
            atol=_get(path, where + ".atol", entry, "atol", float, base.atol, minimum=0),
            rtol=_get(path, where + ".rtol", entry, "rtol", float, base.rtol, minimum=0),
            rel_l2=_get(path, where + ".rel_l2", entry, "rel_l2", float, base.rel_l2, minimum=0),
        )
    return result


def _op_overrides(path: Path, table: Any) -> dict[str, OpOverrides]:
    if not isinstance(table, dict):
        raise FormatError(path, "ops", "must be a table of per-operator tables")
    result = {}
    for op, entry in table.items():
        where = f"ops.{op}"
        if not isinstance(entry, dict):
            raise FormatError(path, where, "must be a table")
        _reject_unknown(path, where + ".", entry,
                        {"tolerances", "reference_dtype", "weight", "timeout_s"})
        ref = entry.get("reference_dtype")
        result[op] = OpOverrides(
            tolerances=_tolerances(path, where + ".tolerances", entry.get("tolerances", {})),
            reference_dtype=None if ref is None else _reference_dtype(
                path, where + ".reference_dtype", ref),
            weight=_get(path, where + ".weight", entry, "weight", float, None, minimum=0),
            timeout_s=_get(path, where + ".timeout_s", entry, "timeout_s", float, None, minimum=1),
        )
    return result
