"""Reading the repository's Python files without running them.

Two uses: signature checks for the loader (is `_make_inputs` called with the keys shapes.json
gives?) and the static layer of fallback detection, which points at suspicious lines with
file:line. Static findings are hints: they never decide a status on their own.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import FormatError
from .model import Finding, FindingKind


@dataclass(frozen=True)
class Params:
    names: list[str]
    required: list[str]
    var_keyword: bool

    def check_call(self, path: Path, where: str, kwargs: dict, what: str) -> None:
        for key in kwargs:
            if key not in self.names and not self.var_keyword:
                raise FormatError(path, f"{where}.{key}", f"not a parameter of {what} "
                                  f"(parameters: {', '.join(self.names) or 'none'})")
        for name in self.required:
            if name not in kwargs:
                raise FormatError(path, where, f"missing {name!r}, required by {what}")


# CPython 3.11 keeps the AST converter's recursion counter per interpreter, not per thread, so two
# threads parsing at once can fail with "SystemError: AST constructor recursion depth mismatch"
# (seen in CI with two GPU lanes of the bot). Every parse in atrex goes through this lock.
_PARSE_LOCK = threading.Lock()


def parse_source(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, safe to call from several threads at once."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename)


def parse(path: Path) -> ast.Module:
    try:
        return parse_source(path.read_text(), filename=str(path))
    except SyntaxError as exc:
        raise FormatError(path, f"line {exc.lineno}", f"syntax error: {exc.msg}") from None
    except UnicodeDecodeError:
        raise FormatError(path, None, "not UTF-8 text") from None


def _params(fn: ast.FunctionDef, skip_self: bool) -> Params:
    args = fn.args
    positional = args.posonlyargs + args.args
    if skip_self and positional:
        positional = positional[1:]
    defaults_from = len(positional) - len(args.defaults)
    names = [a.arg for a in positional] + [a.arg for a in args.kwonlyargs]
    required = [a.arg for i, a in enumerate(positional) if i < defaults_from]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                 if d is None]
    return Params(names=names, required=required, var_keyword=args.kwarg is not None)


def _find_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


def function_params(path: Path, name: str) -> Params:
    fn = _find_function(parse(path), name)
    if fn is None:
        raise FormatError(path, name, f"no top-level function {name}()")
    return _params(fn, skip_self=False)


def _find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def class_in_source(source: str, name: str) -> ast.ClassDef | None:
    """A top-level class of a module's source; None when absent or the source does not parse."""
    try:
        return _find_class(parse_source(source), name)
    except SyntaxError:
        return None


def params_of_method(cls: ast.ClassDef, method: str) -> Params | None:
    """Parameters of a method (after self), or None when the class does not define it."""
    fn = _find_function(ast.Module(body=cls.body, type_ignores=[]), method)
    return None if fn is None else _params(fn, skip_self=True)


def method_params(path: Path, cls: str, method: str, required: bool = True) -> Params | None:
    node = _find_class(parse(path), cls)
    if node is None:
        raise FormatError(path, cls, f"no class {cls}")
    params = params_of_method(node, method)
    if params is None and required:
        raise FormatError(path, f"{cls}.{method}", "method not defined")
    return params


def returned_dict_keys(path: Path, name: str) -> list[str] | None:
    """Keys of the dict literal(s) a function returns, or None if any return is not a literal."""
    fn = _find_function(parse(path), name)
    if fn is None:
        return None
    keys: list[str] | None = None
    for node in ast.walk(fn):
        if not isinstance(node, ast.Return):
            continue
        value = node.value
        if not isinstance(value, ast.Dict) or not all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in value.keys):
            return None
        these = [k.value for k in value.keys]
        if keys is not None and set(keys) != set(these):
            return None
        keys = these
    return keys


# --- static fallback hints --------------------------------------------------------------------

TORCH_COMPUTE = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear", "conv1d", "conv2d", "conv3d",
    "scaled_dot_product_attention", "softmax", "log_softmax", "layer_norm", "rms_norm",
    "group_norm", "batch_norm", "silu", "gelu", "relu", "sigmoid", "tanh", "exp", "log", "sqrt",
    "rsqrt", "sum", "mean", "var", "std", "cumsum", "topk", "sort", "argmax", "argsort",
    "multinomial", "max", "min", "amax", "softplus", "mul", "add", "div", "pow", "square",
    "_scaled_mm", "embedding", "cross_entropy", "normalize", "where", "clamp", "abs",
}
TORCH_MODULE_COMPUTE = {"Linear", "Conv1d", "Conv2d", "Conv3d", "LayerNorm", "RMSNorm",
                        "MultiheadAttention", "Embedding", "Softmax", "SiLU", "GELU"}
LIBRARY_MODULES = {"flash_attn", "flashinfer", "vllm", "sgl_kernel", "sglang", "xformers", "apex",
                   "deep_gemm", "liger_kernel", "transformer_engine", "cutlass", "aiter",
                   "torchao"}
_TORCH_ROOTS = {"torch", "F", "functional", "nn"}


def static_findings(kernel_path: Path, repo_root: Path) -> list[Finding]:
    """Hints for the kernel file and the repository modules it imports."""
    findings: list[Finding] = []
    for path in _local_modules(kernel_path, repo_root):
        try:
            tree = parse_source(path.read_text(), filename=str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue  # the worker reports the compile error with its own message
        rel = _relative(path, repo_root)
        findings.extend(_Scanner(rel).scan(tree))
    return findings


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def local_imports(path: Path, repo_root: Path) -> list[Path]:
    """Files of the repository that a module imports directly (relative or sibling imports)."""
    try:
        tree = parse_source(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError):
        return []
    found = []
    for node in ast.walk(tree):
        names: list[tuple[str, int]] = []
        if isinstance(node, ast.Import):
            names = [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            names = [(base, node.level)] + [(f"{base}.{a.name}" if base else a.name, node.level)
                                            for a in node.names]
        for dotted, level in names:
            candidate = _resolve(path, repo_root, dotted, level)
            if candidate is not None and candidate not in found:
                found.append(candidate)
    return found


def _resolve(path: Path, root: Path, dotted: str, level: int) -> Path | None:
    bases = [path.parent] if level <= 1 else [path.parents[level - 1]]
    if level == 0:
        bases = [path.parent, root]
    parts = [p for p in dotted.split(".") if p]
    if not parts:
        return None
    for base in bases:
        target = base.joinpath(*parts)
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            if candidate.is_file() and root in candidate.resolve().parents:
                return candidate.resolve()
    return None


def _local_modules(kernel_path: Path, repo_root: Path) -> list[Path]:
    seen: list[Path] = []
    queue = [kernel_path.resolve()]
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.append(path)
        if path.name != "reference.py":
            queue.extend(local_imports(path, repo_root))
    return seen


class _Scanner(ast.NodeVisitor):
    def __init__(self, rel: str):
        self.rel = rel
        self.findings: list[Finding] = []

    def scan(self, tree: ast.Module) -> list[Finding]:
        self.visit(tree)
        return self.findings

    def _add(self, kind: FindingKind, node: ast.AST, message: str) -> None:
        self.findings.append(Finding(kind=kind, message=message, file=self.rel,
                                     line=getattr(node, "lineno", None)))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if any(_dotted(d).endswith(("jit", "autotune", "heuristics")) for d in
               (dec.func if isinstance(dec, ast.Call) else dec for dec in node.decorator_list)):
            return  # inside a Triton kernel, tl.* arithmetic is the author's own code
        for dec in node.decorator_list:
            name = _dotted(dec.func if isinstance(dec, ast.Call) else dec)
            if name in ("torch.compile", "compile"):
                self._add(FindingKind.TORCH_COMPILE, dec, "function compiled with torch.compile")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        parts = name.split(".")
        if name in ("torch.compile", "torch.jit.script", "torch.jit.trace"):
            self._add(FindingKind.TORCH_COMPILE, node, f"{name}() hands the work to a compiler")
        elif len(parts) >= 2 and parts[0] in _TORCH_ROOTS and parts[-1] in TORCH_COMPUTE:
            self._add(FindingKind.TORCH_COMPUTE_CALL, node, f"{name}() computes with PyTorch")
        elif len(parts) >= 2 and parts[0] in _TORCH_ROOTS and parts[-1] in TORCH_MODULE_COMPUTE:
            self._add(FindingKind.TORCH_COMPUTE_CALL, node, f"{name} is a PyTorch compute module")
        elif name.endswith(("import_module", "spec_from_file_location", "run_path")) and any(
                isinstance(a, ast.Constant) and "reference" in str(a.value) for a in node.args):
            self._add(FindingKind.REFERENCE_IMPORT, node, "loads the reference implementation")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult):
            self._add(FindingKind.TORCH_COMPUTE_CALL, node, "the @ operator multiplies with "
                      "PyTorch (cuBLAS on a GPU)")
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if not module and any(a.name == "reference" for a in node.names):
            self._add(FindingKind.REFERENCE_IMPORT, node, "imports the reference implementation")
        self._check_module(node, module)

    def _check_module(self, node: ast.AST, module: str) -> None:
        root = module.split(".")[0]
        if root in LIBRARY_MODULES:
            self._add(FindingKind.LIBRARY_IMPORT, node, f"imports {module}, a kernel library")
        if module == "reference" or module.endswith(".reference"):
            self._add(FindingKind.REFERENCE_IMPORT, node, "imports the reference implementation")


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else node.attr
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    return ""
