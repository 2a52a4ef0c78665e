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
    # forward parameters without a default: _make_inputs must return these, may omit the others
    forward_required: list[str] = field(default_factory=list)
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
class OpProblem:
    """An operator directory that could not be loaded: reported as that operator's
    `format_error`, while the other operators are still evaluated."""

    name: str
    dir: str
    error: FormatError


@dataclass
class RepoSpec:
    root: Path
    config: RepoConfig
    ops: list[OpSpec]
    problems: list[OpProblem] = field(default_factory=list)

    def op(self, name: str) -> OpSpec:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)


def load_repo(path: str | Path, only_ops: list[str] | None = None,
              strict: bool = True, needs_kernel: bool = True) -> RepoSpec:
    """The repository's operators. `strict` raises the first malformed operator's FormatError;
    otherwise each malformed operator becomes an OpProblem and the others load. `needs_kernel`
    False: operators without a kernel.py load too (what reads only the reference: the floor)."""
    root = Path(path).resolve()
    if not root.exists():
        raise FormatError(root, None, "no such directory")
    if not root.is_dir():
        raise FormatError(root, None, "not a directory")
    config = load_config(root)
    op_dirs = _find_op_dirs(root, config, _required(needs_kernel))
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
    repo = RepoSpec(root=root, config=config, ops=[])
    for op_dir in op_dirs:
        name = _op_name(root, op_dir)
        try:
            repo.ops.append(load_op(op_dir, name=name, needs_kernel=needs_kernel))
        except FormatError as exc:
            if strict:
                raise
            repo.problems.append(OpProblem(name=name, dir=str(op_dir), error=exc))
    return repo


def _op_name(root: Path, op_dir: Path) -> str:
    return op_dir.name if op_dir != root else root.name


def _required(needs_kernel: bool) -> tuple[str, ...]:
    return OP_FILES if needs_kernel else tuple(f for f in OP_FILES if f != "kernel.py")


def _find_op_dirs(root: Path, config: RepoConfig, required: tuple[str, ...]) -> list[Path]:
    """Every directory that looks like an operator, complete or not: a partial one is reported
    (load_op names the missing files), never skipped in silence."""
    if all((root / f).is_file() for f in required):
        return [root]
    if config.path is None:
        found = {p.parent for name in OP_FILES for p in root.rglob(name)
                 if p.is_file() and not _hidden(p.relative_to(root))}
        return sorted(d for d in found if _looks_like_op(d))
    ops_root = (root / config.ops_root).resolve()
    if not ops_root.is_dir():
        raise FormatError(config.path, "repo.ops_root", f"{ops_root} is not a directory")
    return [child for child in sorted(ops_root.iterdir())
            if child.is_dir() and not _hidden(child.relative_to(ops_root))
            and any((child / f).is_file() for f in OP_FILES)]


def _looks_like_op(directory: Path) -> bool:
    """Without an atrex.toml: a shapes.json, a reference.py defining `class Model` or an input.py
    defining `_make_inputs` marks an operator (read as text, never imported); other files of
    those names (a package's reference.py in a virtualenv) are not one."""
    if "site-packages" in directory.parts:
        return False
    return ((directory / "shapes.json").is_file()
            or _mentions(directory / "reference.py", "class Model")
            or _mentions(directory / "input.py", "def _make_inputs"))


def _mentions(path: Path, text: str) -> bool:
    try:
        return path.is_file() and text in path.read_text(errors="replace")
    except OSError:
        return False


def _hidden(rel: Path) -> bool:
    return any(part.startswith((".", "__")) for part in rel.parts)


def load_op(op_dir: Path, name: str | None = None, needs_kernel: bool = True) -> OpSpec:
    op_dir = Path(op_dir).resolve()
    required = _required(needs_kernel)
    missing = [f for f in required if not (op_dir / f).is_file()]
    if missing:
        present = [f for f in required if f not in missing]
        has = f"has {', '.join(present)} but " if present else ""
        raise FormatError(op_dir / missing[0], None,
                          f"missing file: operator {op_dir.name} {has}not {', '.join(missing)} "
                          f"(an operator needs {', '.join(required)})")
    raw_shapes = _read_json(op_dir / "shapes.json")
    metadata = _read_json(op_dir / "metadata.json") if (op_dir / "metadata.json").is_file() else {}
    make_params = astscan.function_params(op_dir / "input.py", "_make_inputs")
    forward = astscan.method_params(op_dir / "reference.py", "Model", "forward")
    init = astscan.method_params(op_dir / "reference.py", "Model", "__init__", required=False)
    shapes = _parse_shapes(op_dir / "shapes.json", raw_shapes, make_params, init)
    _check_returned_keys(op_dir, forward)
    op = OpSpec(name=name or op_dir.name, dir=str(op_dir), shapes=shapes,
                forward_params=forward.names, forward_required=forward.required)
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
        check_fields(path, f"{shape_id}.", entry, _SHAPE_FIELDS)
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


# Fields atrex acts on. Any other field is description, kept as data (Atrex-Bench adds fields such
# as tensor_parallel_size and source_kernel_name), unless its name is a near miss of one of these:
# a misspelt call_count would silently turn a traced op into a uniformly weighted one.
_SHAPE_FIELDS = {"input_kwargs", "init_kwargs", "targets", "description"}
_METADATA_FIELDS = {"dtype", "input_dtypes", "output_dtypes", "importance_score", "shapes",
                    "flop_dtype", "trace_scale", "mutates"}
_SHAPE_METADATA_FIELDS = {"call_count", "total_duration_us", "production_performance",
                          "weight", "flops", "bytes", "description"}
# descriptive fields known to be no misspelling, whatever they resemble
_DESCRIPTIVE = {"id", "status", "origin", "phase", "description", "notes", "source", "sources",
                "origin_kernel", "source_repo", "source_framework", "shape_key",
                "tensor_parallel_size", "source_kernel_name", "op_type", "tags"}


def check_fields(path: Path, prefix: str, table: dict, read: set[str]) -> None:
    """Accept every field of `table`; refuse only a near miss of a field atrex reads (at most
    two edits away: `call_counts`, `call_cout`; `op_type` is not `flop_dtype`)."""
    for key in table:
        if key in read or key in _DESCRIPTIVE:
            continue
        close = sorted((_edits(str(key), name), name) for name in read)
        if close and close[0][0] <= (2 if len(str(key)) > 4 else 1):
            raise FormatError(path, prefix + str(key),
                              f"unknown field; did you mean {close[0][1]!r}? (atrex reads "
                              + ", ".join(sorted(read)) + "; other fields are kept as "
                              "description)")


def _edits(a: str, b: str) -> int:
    """Levenshtein distance."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


def _apply_metadata(path: Path, op: OpSpec, metadata: Any) -> None:
    if not isinstance(metadata, dict):
        raise FormatError(path, None, "must be a JSON object")
    check_fields(path, "", metadata, _METADATA_FIELDS)
    shape_meta = metadata.get("shapes") or {}
    if not isinstance(shape_meta, dict):
        raise FormatError(path, "shapes", "must be an object keyed by shape id")
    for shape_id, meta in shape_meta.items():
        if isinstance(meta, dict):
            check_fields(path, f"shapes.{shape_id}.", meta, _SHAPE_METADATA_FIELDS)
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
