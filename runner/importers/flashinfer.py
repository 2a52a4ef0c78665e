"""FlashInfer-Bench definitions (and their workloads) as native operators.

A definition is JSON: `name`, `op_type`, `axes` (`const` with a value, or `var`), `inputs` and
`outputs` (each an axis-name shape, or null for a scalar, and a dtype), `reference` (Python with
a `run` function) and optional `constraints` between axes. Workloads are JSONL, one per line
(`{"definition": name, "workload": {"uuid", "axes": {var axis: value}, "inputs": {...}}}`).
Written:
- reference.py: the definition's reference code, with a `Model` whose forward calls `run`;
- input.py: `_make_inputs(**axes, **scalars)` draws each input tensor at random in its dtype;
- shapes.json: one GPU shape per distinct workload (its var axes, the const axes, its scalar
  inputs), and one CPU shape: the smallest workload, scaled down by the probe (const axes too,
  as long as the reference and the constraints accept it);
- metadata.json: the definition's name, op_type, tags and description.
"""

from __future__ import annotations

import json
import keyword
from pathlib import Path

from .common import ImportProblem, OpFiles, op_name, run_probe
from .templates import FLASHINFER_INPUT, FLASHINFER_REFERENCE_TAIL, RANDOM_TENSOR

DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
          "float4_e2m1": 1, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "bool": 1}
_DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}


def definition_files(sources: list[Path]) -> list[Path]:
    files = []
    for source in sources:
        if source.is_dir():
            files += sorted(p.resolve() for p in source.rglob("*.json") if _is_definition(p))
        elif source.is_file():
            files.append(source)
        else:
            raise ImportProblem(source, "no such file or directory")
    return files


def _is_definition(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and {"name", "axes", "inputs", "reference"} <= set(data)


class Definition:
    def __init__(self, path: Path):
        self.path = path
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ImportProblem(path, f"line {exc.lineno}: not valid JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise ImportProblem(path, "not a definition (a JSON object)")
        for key in ("name", "axes", "inputs", "outputs", "reference"):
            if key not in data:
                raise ImportProblem(path, f"{key}: missing")
        self.data = data
        self.name = str(data["name"])
        self.const, self.var = self._axes(data["axes"])
        self.tensors, self.scalars = self._inputs(data["inputs"])
        if "def run(" not in data["reference"]:
            raise ImportProblem(path, "reference: no `run` function")
        self.constraints = [str(c) for c in data.get("constraints") or []]

    def _axes(self, axes) -> tuple[dict[str, int], list[str]]:
        if not isinstance(axes, dict):
            raise ImportProblem(self.path, "axes: must be an object")
        const, var = {}, []
        for name, spec in axes.items():
            kind = spec.get("type") if isinstance(spec, dict) else None
            if kind == "const" and isinstance(spec.get("value"), int):
                const[name] = spec["value"]
            elif kind == "var":
                var.append(name)
            else:
                raise ImportProblem(self.path, f"axes.{name}: must be {{\"type\": \"const\", "
                                    "\"value\": int} or {\"type\": \"var\"}")
            _identifier(self.path, f"axes.{name}", name)
        return const, var

    def _inputs(self, inputs) -> tuple[dict[str, tuple[list[str], str]], list[str]]:
        if not isinstance(inputs, dict) or not inputs:
            raise ImportProblem(self.path, "inputs: must be a non-empty object")
        tensors, scalars = {}, []
        for name, spec in inputs.items():
            _identifier(self.path, f"inputs.{name}", name)
            dtype = spec.get("dtype") if isinstance(spec, dict) else None
            if dtype not in DTYPES:
                raise ImportProblem(self.path, f"inputs.{name}.dtype: {dtype!r} is not one of "
                                    f"{', '.join(DTYPES)}")
            shape = spec.get("shape")
            if shape is None:
                scalars.append(name)
                continue
            unknown = [a for a in shape if a not in self.const and a not in self.var]
            if unknown:
                raise ImportProblem(self.path, f"inputs.{name}.shape: unknown axes {unknown}")
            tensors[name] = (list(shape), dtype)
        return tensors, scalars

    def input_bytes(self, axes: dict[str, int]) -> int:
        total = 0
        for shape, dtype in self.tensors.values():
            count = 1
            for axis in shape:
                count *= axes[axis]
            total += count * DTYPES[dtype]
        return total


def _identifier(path: Path, where: str, name: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ImportProblem(path, f"{where}: {name!r} is not a Python identifier")


def workloads_for(definition: Definition, sources: list[Path]) -> list[dict]:
    """The definition's workloads: from the given JSONL files or directories, else from the
    trace-set layout beside it (definitions/<op_type>/<name>.json ->
    workloads/<op_type>/<name>.jsonl)."""
    files = []
    for source in sources:
        if source.is_dir():
            files += sorted(source.rglob(f"{definition.name}.jsonl"))
        elif source.is_file():
            files.append(source)
    if not sources:
        for parent in definition.path.parents:
            if parent.name == "definitions":
                relative = definition.path.relative_to(parent).with_suffix(".jsonl")
                files.append(parent.parent / "workloads" / relative)
                break
    workloads = []
    for path in files:
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ImportProblem(path, f"line {number}: not valid JSON: {exc.msg}") from None
            if entry.get("definition") not in (None, definition.name):
                continue
            workloads.append(_workload(definition, path, number, entry.get("workload", entry)))
    return workloads


def _workload(definition: Definition, path: Path, number: int, workload: dict) -> dict:
    axes = workload.get("axes") or {}
    missing = [a for a in definition.var if a not in axes]
    if missing:
        raise ImportProblem(path, f"line {number}: workload has no value for var axes {missing}")
    scalars, not_carried = {}, []
    for name, spec in (workload.get("inputs") or {}).items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if kind == "scalar":
            scalars[name] = spec.get("value")
        elif kind == "safetensors":
            not_carried.append(name)
    return {"uuid": str(workload.get("uuid", f"line{number}")),
            "axes": {a: int(axes[a]) for a in definition.var}, "scalars": scalars,
            "not_carried": not_carried}


def import_definitions(files: list[Path], workload_sources: list[Path],
                       cpu_bytes: int) -> tuple[list[OpFiles], list[ImportProblem]]:
    prepared, failures = [], []
    for path in files:
        try:
            definition = Definition(path)
            workloads = _distinct(workloads_for(definition, workload_sources))
            if not workloads and definition.var:
                raise ImportProblem(path, "no workloads: the var axes "
                                    f"{definition.var} have no values (give --workloads)")
            prepared.append((definition, workloads or [{"uuid": "const", "axes": {},
                                                        "scalars": {}, "not_carried": []}]))
        except ImportProblem as exc:
            failures.append(exc)
    if not prepared:
        return [], failures
    items = [_probe_item(d, w) for d, w in prepared]
    results = run_probe({"kind": "flashinfer", "cpu_bytes": cpu_bytes, "items": items,
                         "label": "flashinfer-bench"})
    ops = []
    for (definition, workloads), result in zip(prepared, results, strict=True):
        if not result["ok"]:
            failures.append(ImportProblem(definition.path, f"cannot size it on the meta device: "
                                          f"{result['error']}"))
            continue
        ops.append(_op_files(definition, workloads, result))
    return ops, failures


def _distinct(workloads: list[dict]) -> list[dict]:
    seen, result = set(), []
    for workload in workloads:
        key = json.dumps([workload["axes"], workload["scalars"]], sort_keys=True)
        if key not in seen:
            seen.add(key)
            result.append(workload)
    return result


def _smallest(definition: Definition, workloads: list[dict]) -> dict:
    return min(workloads, key=lambda w: definition.input_bytes({**definition.const, **w["axes"]}))


def _probe_item(definition: Definition, workloads: list[dict]) -> dict:
    smallest = _smallest(definition, workloads)
    return {"name": definition.name, "reference": definition.data["reference"],
            "axes": {**definition.const, **smallest["axes"]}, "tensors": definition.tensors,
            "scalars": {n: smallest["scalars"].get(n) for n in definition.scalars},
            "constraints": definition.constraints}


def _op_files(definition: Definition, workloads: list[dict], result: dict) -> OpFiles:
    shapes = {}
    for index, workload in enumerate(workloads):
        shapes[f"w{index}"] = {
            "init_kwargs": None, "targets": ["cuda"],
            "input_kwargs": {**definition.const, **workload["axes"],
                             **{n: workload["scalars"].get(n) for n in definition.scalars}},
            "description": f"workload {workload['uuid']}"}
    smallest = _smallest(definition, workloads)
    cpu_kwargs = {**result["cpu"]["sizes"],
                  **{n: smallest["scalars"].get(n) for n in definition.scalars}}
    same = [sid for sid, shape in shapes.items() if shape["input_kwargs"] == cpu_kwargs]
    if same:  # the smallest workload fits a CPU run as it is
        shapes[same[0]]["targets"] = ["cpu", "cuda"]
    else:
        shapes["cpu"] = {"init_kwargs": None, "targets": ["cpu"], "input_kwargs": cpu_kwargs,
                         "description": "the smallest workload, scaled down for a CPU run"}
    data = definition.data
    metadata = {"source": "flashinfer-bench", "origin": {"file": str(definition.path),
                                                         "definition": definition.name},
                "description": data.get("description"), "op_type": data.get("op_type"),
                "tags": data.get("tags") or []}
    dtypes = sorted({dtype for _, dtype in definition.tensors.values()
                     if dtype.startswith(("float", "bfloat"))})
    if len(dtypes) == 1 and dtypes[0] in _DTYPE_SHORT:
        metadata["dtype"] = _DTYPE_SHORT[dtypes[0]]
    notes = [result["note"]] if result.get("note") else []
    not_carried = sorted({n for w in workloads for n in w["not_carried"]})
    if not_carried:
        notes.append(f"inputs {not_carried} come from safetensors files in the workloads; "
                     "they are drawn at random here (edit input.py if they need structure)")
    integers = [n for n, (_, dtype) in definition.tensors.items() if dtype.startswith("int")]
    if integers:
        notes.append(f"integer inputs {integers} are random in [0, 16): edit input.py if they "
                     "are indices or offsets")
    notes.append("no candidate: add kernel.py (a class Model whose forward takes "
                 f"{list(definition.tensors) + definition.scalars})")
    return OpFiles(name=op_name(definition.name), reference=_reference_py(definition),
                   inputs=_input_py(definition), shapes=shapes, metadata=metadata, notes=notes)


def _names(definition: Definition) -> list[str]:
    return list(definition.data["inputs"])


def _reference_py(definition: Definition) -> str:
    names = _names(definition)
    return definition.data["reference"].rstrip() + "\n" + FLASHINFER_REFERENCE_TAIL.format(
        params=", ".join(names), args=", ".join(f"{n}={n}" for n in names))


def _input_py(definition: Definition) -> str:
    axes = list(definition.const) + definition.var
    params = [f"{a}={definition.const[a]!r}" if a in definition.const else a for a in axes]
    params += [f"{s}=None" for s in definition.scalars]
    var_first = [p for p in params if "=" not in p] + [p for p in params if "=" in p]
    return FLASHINFER_INPUT.format(
        name=definition.name, tensors=definition.tensors, scalars=definition.scalars,
        random=RANDOM_TENSOR, params=", ".join(var_first),
        axes_dict="{" + ", ".join(f"{a!r}: {a}" for a in axes) + "}",
        scalars_dict="{" + ", ".join(f"{s!r}: {s}" for s in definition.scalars) + "}")
