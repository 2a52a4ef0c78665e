"""Loading a kernel repository in the native (Atrex-Bench style) format.

Everything here is checked statically, without importing any of the repository's code: the files
are untrusted and only ever imported inside the sandboxed worker. Signature checks read the AST.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import astscan
from .config import RepoConfig, load_config
from .dtypes import canonical_dtype, is_known_dtype_spec, peak_class
from .errors import FormatError

OP_FILES = ("reference.py", "input.py", "shapes.json", "kernel.py")
TARGETS = ("cpu", "cuda")


@dataclass
class ShapeSpec:
    id: str
    input_kwargs: dict[str, Any]
    init_kwargs: dict[str, Any]
    targets: tuple[str, ...] = TARGETS
    weight: float = 1.0  # calls of this shape in the trace (or a proxy), see shape_weight
    flops: float | None = None  # declared FLOPs where the counter would see nothing useful
    bytes: float | None = None  # declared semantic bytes (e.g. only the used pages of a KV pool)
    description: str | None = None


@dataclass
class OpSpec:
    name: str
    dir: str
    shapes: list[ShapeSpec]
    dtype: str | None = None
    importance: float | None = None
    flop_dtype: str | None = None  # which peak bounds the declared/counted FLOPs (e.g. "fp8")
    trace_scale: float = 1.0  # multiplies GPU-hours when the trace is a sample of a fleet
    weight_source: str = "uniform"  # "trace" when call counts came from the metadata
    forward_params: list[str] = field(default_factory=list)
    mutates: list[str] = field(default_factory=list)  # inputs the operator updates in place
    kernel_file: str = "kernel.py"

    @property
    def flop_dtype_class(self) -> str | None:
        name = canonical_dtype(self.flop_dtype) if self.flop_dtype else None
        return peak_class(name) if name else None

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def shape(self, shape_id: str) -> ShapeSpec:
        for shape in self.shapes:
            if shape.id == shape_id:
                return shape
        raise KeyError(shape_id)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpSpec:
        data = dict(data)
        data["shapes"] = [ShapeSpec(**{**s, "targets": tuple(s["targets"])})
                          for s in data["shapes"]]
        return cls(**data)


@dataclass
class RepoSpec:
    root: Path
    config: RepoConfig
    ops: list[OpSpec]

    def op(self, name: str) -> OpSpec:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)


def load_repo(path: str | Path, only_ops: list[str] | None = None) -> RepoSpec:
    root = Path(path).resolve()
    if not root.exists():
        raise FormatError(root, None, "no such directory")
    if not root.is_dir():
        raise FormatError(root, None, "not a directory")
    config = load_config(root)
    op_dirs = _find_op_dirs(root, config)
    if not op_dirs:
        raise FormatError(root, None, "no operator directories found (each needs "
                          + ", ".join(OP_FILES) + ")")
    names = [_op_name(root, d) for d in op_dirs]
    if only_ops:
        unknown = [n for n in only_ops if n not in names]
        if unknown:
            raise FormatError("--op", None, f"no operator named {', '.join(unknown)} in {root} "
                              f"(operators: {', '.join(sorted(names))})")
        op_dirs = [d for d, n in zip(op_dirs, names, strict=True) if n in only_ops]
    ops = [load_op(d, name=_op_name(root, d)) for d in op_dirs]
    return RepoSpec(root=root, config=config, ops=ops)


def _op_name(root: Path, op_dir: Path) -> str:
    return op_dir.name if op_dir != root else root.name


def _find_op_dirs(root: Path, config: RepoConfig) -> list[Path]:
    if all((root / f).is_file() for f in OP_FILES):
        return [root]
    if config.path is None:
        return sorted(p.parent for p in root.rglob("reference.py")
                      if all((p.parent / f).is_file() for f in OP_FILES)
                      and not _hidden(p.relative_to(root)))
    ops_root = (root / config.ops_root).resolve()
    if not ops_root.is_dir():
        raise FormatError(config.path, "repo.ops_root", f"{ops_root} is not a directory")
    dirs = []
    for child in sorted(ops_root.iterdir()):
        present = [f for f in OP_FILES if (child / f).is_file()]
        if not child.is_dir() or not present or _hidden(child.relative_to(ops_root)):
            continue
        missing = [f for f in OP_FILES if f not in present]
        if missing:
            raise FormatError(child / missing[0], None,
                              f"missing: operator {child.name} has {', '.join(present)} but "
                              f"not {', '.join(missing)}")
        dirs.append(child)
    return dirs


def _hidden(rel: Path) -> bool:
    return any(part.startswith((".", "__")) for part in rel.parts)


def load_op(op_dir: Path, name: str | None = None) -> OpSpec:
    op_dir = Path(op_dir).resolve()
    for f in OP_FILES:
        if not (op_dir / f).is_file():
            raise FormatError(op_dir / f, None, "missing file")
    raw_shapes = _read_json(op_dir / "shapes.json")
    metadata = _read_json(op_dir / "metadata.json") if (op_dir / "metadata.json").is_file() else {}
    make_params = astscan.function_params(op_dir / "input.py", "_make_inputs")
    forward = astscan.method_params(op_dir / "reference.py", "Model", "forward")
    init = astscan.method_params(op_dir / "reference.py", "Model", "__init__", required=False)
    shapes = _parse_shapes(op_dir / "shapes.json", raw_shapes, make_params, init)
    _check_returned_keys(op_dir, forward)
    op = OpSpec(name=name or op_dir.name, dir=str(op_dir), shapes=shapes,
                forward_params=forward.names)
    _apply_metadata(op_dir / "metadata.json", op, metadata)
    return op


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FormatError(path, f"line {exc.lineno} column {exc.colno}",
                          f"not valid JSON: {exc.msg}") from None
    except UnicodeDecodeError:
        raise FormatError(path, None, "not UTF-8 text") from None


def _parse_shapes(path: Path, raw: Any, make_params: astscan.Params,
                  init: astscan.Params | None) -> list[ShapeSpec]:
    if not isinstance(raw, dict) or not raw:
        raise FormatError(path, None, 'must be a non-empty object {"<shape id>": {...}}')
    shapes = []
    for shape_id, entry in raw.items():
        if not isinstance(entry, dict):
            raise FormatError(path, shape_id, "must be an object with input_kwargs")
        unknown = set(entry) - {"input_kwargs", "init_kwargs", "targets", "description"}
        if unknown:
            raise FormatError(path, f"{shape_id}.{sorted(unknown)[0]}", "unknown field")
        inputs = entry.get("input_kwargs")
        if not isinstance(inputs, dict):
            raise FormatError(path, f"{shape_id}.input_kwargs", "missing or not an object")
        make_params.check_call(path, f"{shape_id}.input_kwargs", inputs, "input.py _make_inputs")
        init_kwargs = entry.get("init_kwargs") or {}
        if not isinstance(init_kwargs, dict):
            raise FormatError(path, f"{shape_id}.init_kwargs", "must be an object or null")
        if init is not None:
            init.check_call(path, f"{shape_id}.init_kwargs", init_kwargs,
                            "reference.py Model.__init__")
        targets = entry.get("targets", list(TARGETS))
        if (not isinstance(targets, list) or not targets
                or any(t not in TARGETS for t in targets)):
            raise FormatError(path, f"{shape_id}.targets",
                              f"must be a non-empty list drawn from {list(TARGETS)}")
        shapes.append(ShapeSpec(id=str(shape_id), input_kwargs=inputs, init_kwargs=init_kwargs,
                                targets=tuple(targets), description=entry.get("description")))
    return shapes


def _check_returned_keys(op_dir: Path, forward: astscan.Params) -> None:
    keys = astscan.returned_dict_keys(op_dir / "input.py", "_make_inputs")
    if keys is None:
        return  # not a literal dict: the worker checks the keys at run time
    missing = [p for p in forward.required if p not in keys]
    extra = [k for k in keys if k not in forward.names and not forward.var_keyword]
    if missing or extra:
        detail = []
        if missing:
            detail.append(f"forward needs {missing} which _make_inputs does not return")
        if extra:
            detail.append(f"_make_inputs returns {extra} which forward does not take")
        raise FormatError(op_dir / "input.py", "_make_inputs",
                          "keys do not match reference.py Model.forward: " + "; ".join(detail))


# Atrex-Bench's descriptive fields are accepted as they are; anything else is most likely a typo
# (a misspelt call_count would silently turn a traced op into a uniformly weighted one).
_METADATA_KEYS = {"id", "status", "dtype", "input_dtypes", "output_dtypes", "origin", "phase",
                  "importance_score", "shapes", "flop_dtype", "trace_scale", "mutates",
                  "description", "notes", "source", "sources"}
_SHAPE_METADATA_KEYS = {"description", "origin_kernel", "source_repo", "source_framework",
                        "call_count", "total_duration_us", "production_performance", "shape_key",
                        "weight", "flops", "bytes", "notes"}


def _apply_metadata(path: Path, op: OpSpec, metadata: Any) -> None:
    if not isinstance(metadata, dict):
        raise FormatError(path, None, "must be a JSON object")
    _reject_unknown(path, "", metadata, _METADATA_KEYS)
    for shape_id, meta in (metadata.get("shapes") or {}).items():
        if isinstance(meta, dict):
            _reject_unknown(path, f"shapes.{shape_id}.", meta, _SHAPE_METADATA_KEYS)
    for key in ("dtype", "flop_dtype"):
        if key in metadata and not is_known_dtype_spec(metadata[key]):
            raise FormatError(path, key, f"unknown dtype {metadata[key]!r}")
    for table in ("input_dtypes", "output_dtypes"):
        for name, spec in (metadata.get(table) or {}).items():
            if not is_known_dtype_spec(spec):
                raise FormatError(path, f"{table}.{name}", f"unknown dtype {spec!r}")
    op.dtype = metadata.get("dtype")
    op.flop_dtype = metadata.get("flop_dtype")
    op.importance = _number(path, "importance_score", metadata.get("importance_score"))
    op.trace_scale = _number(path, "trace_scale", metadata.get("trace_scale")) or 1.0
    op.mutates = _mutates(path, metadata.get("mutates", []), op.forward_params)
    shape_meta = metadata.get("shapes") or {}
    if not isinstance(shape_meta, dict):
        raise FormatError(path, "shapes", "must be an object keyed by shape id")
    ids = {s.id for s in op.shapes}
    for shape_id in shape_meta:
        if shape_id not in ids:
            raise FormatError(path, f"shapes.{shape_id}",
                              f"shape id does not exist in shapes.json (ids: {sorted(ids)})")
    has_trace = any(shape_weight(path, sid, m) is not None for sid, m in shape_meta.items())
    for shape in op.shapes:
        meta = shape_meta.get(shape.id, {})
        weight = shape_weight(path, shape.id, meta)
        # A traced op whose metadata omits a shape's count: the shape was seen, count it once.
        shape.weight = weight if weight is not None else 1.0
        shape.flops = _number(path, f"shapes.{shape.id}.flops", meta.get("flops"))
        shape.bytes = _number(path, f"shapes.{shape.id}.bytes", meta.get("bytes"))
        shape.description = shape.description or meta.get("description")
    op.weight_source = "trace" if has_trace else "uniform"


def _reject_unknown(path: Path, prefix: str, table: dict, allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            raise FormatError(path, prefix + key, "unknown field (expected one of "
                              + ", ".join(sorted(allowed)) + ")")


def _mutates(path: Path, value: Any, forward_params: list[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise FormatError(path, "mutates", "must be a list of input names")
    for name in value:
        if name not in forward_params:
            raise FormatError(path, "mutates", f"{name!r} is not an input of Model.forward")
    return value


def shape_weight(path: Path, shape_id: str, meta: Any) -> float | None:
    """Calls of a shape in the trace: call_count, else total time over time per call."""
    if not isinstance(meta, dict):
        raise FormatError(path, f"shapes.{shape_id}", "must be an object")
    where = f"shapes.{shape_id}"
    explicit = _number(path, f"{where}.weight", meta.get("weight"))
    if explicit is not None:
        return explicit
    calls = _number(path, f"{where}.call_count", meta.get("call_count"))
    if calls is not None:
        return calls
    total = _number(path, f"{where}.total_duration_us", meta.get("total_duration_us"))
    perf = meta.get("production_performance") or {}
    per_call = _number(path, f"{where}.production_performance.performance_us",
                       perf.get("performance_us") if isinstance(perf, dict) else None)
    if total is not None and per_call:
        return total / per_call
    return None


def _number(path: Path, where: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FormatError(path, where, f"must be a finite number, got {value!r}")
    if value < 0:
        raise FormatError(path, where, f"must not be negative, got {value!r}")
    return float(value)
