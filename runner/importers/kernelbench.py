"""KernelBench problems as native operators.

A problem file defines `class Model(nn.Module)`, module-level sizes, `get_inputs()` (positional
forward arguments) and `get_init_inputs()` (positional `Model.__init__` arguments). Written:
- reference.py: the problem file as it is (its `Model` is the reference);
- input.py: `_make_inputs(**sizes)` executes reference.py with those sizes and names the values
  of `get_inputs()` after `Model.forward`'s parameters;
- shapes.json: `kernelbench` (the problem's own sizes, GPU only) and `cpu` (scaled down by the
  probe to about --cpu-bytes of inputs and parameters, CPU only); init_kwargs are the values of
  `get_init_inputs()` at those sizes, named after `Model.__init__`'s parameters;
- metadata.json: where it came from, the dtype of its inputs;
- kernel.py: a candidate from --candidates (KernelBench's `ModelNew`, or a `Model`), if found.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .. import astscan
from .common import ImportProblem, OpFiles, op_name, run_probe
from .templates import KERNELBENCH_INPUT, PROBLEM_LOADER

_DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


def problem_files(sources: list[Path]) -> list[Path]:
    files = []
    for source in sources:
        if source.is_dir():
            files += sorted(p.resolve() for p in source.rglob("*.py") if _is_problem(p))
        elif source.is_file():
            files.append(source.resolve())
        else:
            raise ImportProblem(source, "no such file or directory")
    return files


def _is_problem(path: Path) -> bool:
    try:
        tree = astscan.parse_source(path.read_text(), str(path))
    except (SyntaxError, UnicodeDecodeError):
        return False
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return {"Model", "get_inputs"} <= names


def _problem_name(path: Path) -> str:
    level = path.parent.name
    return op_name(f"{level}_{path.stem}" if re.fullmatch(r"level\d+", level) else path.stem)


class Problem:
    """What the file says without running it."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.tree = astscan.parse_source(path.read_text(), str(path))
        except SyntaxError as exc:
            raise ImportProblem(path, f"line {exc.lineno}: syntax error: {exc.msg}") from None
        except UnicodeDecodeError:
            raise ImportProblem(path, "not UTF-8 text") from None
        model = _top(self.tree, ast.ClassDef, "Model")
        if model is None:
            raise ImportProblem(path, "no class Model")
        for function in ("get_inputs", "get_init_inputs"):
            if _top(self.tree, ast.FunctionDef, function) is None:
                raise ImportProblem(path, f"no function {function}()")
        forward = astscan.params_of_method(model, "forward")
        if forward is None:
            raise ImportProblem(path, "Model has no forward method")
        init = astscan.params_of_method(model, "__init__")
        self.forward = forward.names
        self.init = init.names if init is not None else []
        self.sizes = self._literal_ints()
        self.frozen = sorted(self._read_by_classes() & set(self.sizes))

    def _literal_ints(self) -> dict[str, int]:
        """Module-level names assigned an integer computed from literals only (`N = 2048 * 2`):
        the sizes a shape may set. Names computed from other names follow them."""
        sizes = {}
        for node in self.tree.body:
            targets, value = _assignment(node)
            number = _arithmetic(value) if value is not None else None
            if isinstance(number, int) and not isinstance(number, bool):
                sizes.update({t: number for t in targets})
        return sizes

    def _read_by_classes(self) -> set[str]:
        """Module-level names that a class's methods read directly: the reference module is
        loaded once at its own sizes, so these must keep them in every shape."""
        read = set()
        for cls in (n for n in self.tree.body if isinstance(n, ast.ClassDef)):
            for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
                local = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
                local |= {n.id for n in ast.walk(fn)
                          if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                read |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                         and isinstance(n.ctx, ast.Load) and n.id not in local}
        return read


_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
              ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
              ast.Mod: lambda a, b: a % b, ast.Pow: lambda a, b: a ** b}


def _arithmetic(node: ast.expr) -> int | None:
    """The value of integer arithmetic on literals (`2048 * 2`, `2 ** 20`), else None; read,
    never executed."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, int) else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _arithmetic(node.operand)
        return -inner if inner is not None else None
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _arithmetic(node.left), _arithmetic(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Pow) and not 0 <= right <= 64:
            return None  # 9 ** 9 ** 9 is not a size, and would not finish
        if isinstance(node.op, ast.FloorDiv | ast.Mod) and right == 0:
            return None
        return _OPERATORS[type(node.op)](left, right)
    return None


def _top(tree: ast.Module, kind: type, name: str):
    return next((n for n in tree.body if isinstance(n, kind) and n.name == name), None)


def _assignment(node: ast.stmt) -> tuple[list[str], ast.expr | None]:
    if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
        return [t.id for t in node.targets], node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id], node.value
    return [], None


def import_problems(files: list[Path], candidates: Path | None,
                    cpu_bytes: int) -> tuple[list[OpFiles], list[ImportProblem]]:
    problems, failures = [], []
    for path in files:
        try:
            problems.append(Problem(path))
        except ImportProblem as exc:
            failures.append(exc)
    if not problems:
        return [], failures
    results = run_probe({"kind": "kernelbench", "cpu_bytes": cpu_bytes, "label": "kernelbench",
                         "items": [{"path": str(p.path), "sizes": p.sizes, "frozen": p.frozen}
                                   for p in problems]})
    ops = []
    for problem, result in zip(problems, results, strict=True):
        try:
            if not result["ok"]:
                raise ImportProblem(problem.path, f"cannot size it on the meta device: "
                                    f"{result['error']}")
            ops.append(_op_files(problem, result, candidates))
        except ImportProblem as exc:
            failures.append(exc)
    return ops, failures


def _op_files(problem: Problem, result: dict, candidates: Path | None) -> OpFiles:
    gpu, cpu = result["gpu"], result["cpu"]
    if len(gpu["init"]) > len(problem.init):
        raise ImportProblem(problem.path, f"get_init_inputs() returns {len(gpu['init'])} values "
                            f"but Model.__init__ takes {len(problem.init)} ({problem.init})")
    if len(gpu["inputs"]) > len(problem.forward):
        raise ImportProblem(problem.path, f"get_inputs() returns {len(gpu['inputs'])} values but "
                            f"Model.forward takes {len(problem.forward)} ({problem.forward})")
    shapes = {"kernelbench": _shape(problem, gpu, ["cuda"], "KernelBench's sizes")}
    if cpu["sizes"] == gpu["sizes"]:
        shapes["kernelbench"]["targets"] = ["cpu", "cuda"]
    else:
        changed = ", ".join(f"{k} {gpu['sizes'][k]} -> {v}" for k, v in cpu["sizes"].items()
                            if v != gpu["sizes"][k])
        shapes["cpu"] = _shape(problem, cpu, ["cpu"], f"scaled down for a CPU run: {changed}")
    dtypes = sorted({i["dtype"] for i in gpu["inputs"] if "dtype" in i})
    metadata = {"source": "kernelbench", "origin": {"file": str(problem.path)},
                "description": _docstring(problem)}
    if len(dtypes) == 1 and dtypes[0] in _DTYPE_SHORT:
        metadata["dtype"] = _DTYPE_SHORT[dtypes[0]]
    notes = [result["note"]] if result.get("note") else []
    kernel = _candidate(problem.path, candidates) if candidates else None
    if kernel is None:
        notes.append("no candidate: add kernel.py (a class ModelNew or Model)")
    return OpFiles(name=_problem_name(problem.path), reference=problem.path.read_text(),
                   inputs=_input_py(problem), shapes=shapes, metadata=metadata,
                   kernel=kernel, notes=notes)


def _shape(problem: Problem, sized: dict, targets: list[str], description: str) -> dict:
    return {"init_kwargs": dict(zip(problem.init, sized["init"], strict=False)),
            "input_kwargs": dict(sized["sizes"]), "targets": targets,
            "description": description}


def _input_py(problem: Problem) -> str:
    params = ", ".join(f"{name}={value!r}" for name, value in problem.sizes.items())
    sizes_dict = "{" + ", ".join(f"{name!r}: {name}" for name in problem.sizes) + "}"
    return KERNELBENCH_INPUT.format(forward=tuple(problem.forward), loader=PROBLEM_LOADER,
                                    params=params, sizes_dict=sizes_dict)


def _docstring(problem: Problem) -> str | None:
    model = _top(problem.tree, ast.ClassDef, "Model")
    text = ast.get_docstring(model) if model is not None else None
    return " ".join(text.split()) if text else None


def _candidate(problem: Path, directory: Path) -> str | None:
    """A candidate for this problem in `directory`: `<stem>.py`, `<stem>_kernel.py`, or
    KernelBench's generation name `level_<L>_problem_<N>_sample_<S>_kernel.py` (lowest S)."""
    for name in (f"{problem.stem}.py", f"{problem.stem}_kernel.py"):
        if (directory / name).is_file():
            return (directory / name).read_text()
    level = re.fullmatch(r"level(\d+)", problem.parent.name)
    number = re.match(r"(\d+)_", problem.name)
    if level and number:
        pattern = re.compile(rf"level_{level[1]}_problem_{number[1]}_sample_(\d+)_kernel\.py")
        samples = sorted((int(m[1]), p) for p in directory.glob("*.py")
                         if (m := pattern.fullmatch(p.name)))
        if samples:
            return samples[0][1].read_text()
    return None
