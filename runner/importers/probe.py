"""The importers' probe process: runs problem code on the meta device to size its shapes.

`python -m atrex.runner.importers.probe` reads a JSON request on stdin and writes one result per
item on stdout. For each problem it measures the input (and parameter) bytes at the problem's own
sizes, then halves the largest size, over and over, until the bytes fit the CPU target: a halving
that breaks the problem (its reference raises, a definition's constraint fails) or saves nothing
freezes that size. Tensors on the meta device have shapes and no data, so a 6 GB problem costs
nothing to probe. Problem code runs here, never in the importing process.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from ..judge.survey import on_meta
from .templates import PROBLEM_LOADER, RANDOM_TENSOR

MIN_SIZE = 8  # sizes are halved down to this, and only sizes of at least 2x this are scaled
MAX_STEPS = 256

Evaluate = Callable[[dict], dict]


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def shrink(sizes: dict, evaluate: Evaluate, target: int) -> tuple[dict, dict, list[str]]:
    """Halve the largest scalable size until `evaluate(sizes)["bytes"]` fits `target`."""
    current, best = dict(sizes), evaluate(sizes)
    candidates = [n for n, v in sizes.items() if isinstance(v, int) and not isinstance(v, bool)
                  and v >= 2 * MIN_SIZE]
    frozen: list[str] = []
    for _ in range(MAX_STEPS):
        if best["bytes"] <= target:
            break
        options = [n for n in candidates if n not in frozen and current[n] // 2 >= MIN_SIZE]
        if not options:
            break
        name = max(options, key=lambda n: (current[n], n))
        trial = {**current, name: current[name] // 2}
        try:
            result = evaluate(trial)
        except Exception:  # noqa: BLE001 - this size cannot be halved: keep it
            frozen.append(name)
            continue
        if result["bytes"] >= best["bytes"]:
            frozen.append(name)
            continue
        current, best = trial, result
    return current, best, frozen


# --- KernelBench ----------------------------------------------------------------------------------

def _loader():
    namespace: dict = {}
    exec(PROBLEM_LOADER, namespace)  # the same text input.py carries
    return namespace["_problem_module"]


def _plain(value, where: str):
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} holds {value}, which JSON cannot carry")
        return value
    if isinstance(value, list | tuple):
        return [_plain(v, where) for v in value]
    raise ValueError(f"{where} holds a {type(value).__name__}, which shapes.json cannot carry")


def kernelbench_evaluator(path: Path, check_forward: bool) -> Evaluate:
    load = _loader()

    def evaluate(sizes: dict) -> dict:
        module = load(path, sizes)
        with on_meta():
            init = list(module.get_init_inputs())
            values = list(module.get_inputs())
            model = module.Model(*init)
            params = list(model.parameters()) + list(model.buffers()) \
                if isinstance(model, torch.nn.Module) else []
            if check_forward:
                with torch.no_grad():
                    model(*values)
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        return {"init": _plain(init, "get_init_inputs()"),
                "inputs": [_describe(v) for v in values],
                "bytes": _nbytes(tensors) + _nbytes(params), "input_bytes": _nbytes(tensors)}
    return evaluate


def _describe(value) -> dict:
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    return {"value": _plain(value, "get_inputs()")}


def probe_kernelbench(item: dict, target: int) -> dict:
    path = Path(item["path"])
    sizes = {k: v for k, v in item["sizes"].items()}
    scalable = {k: v for k, v in sizes.items() if k not in item.get("frozen", [])}
    note = None
    try:
        gpu = kernelbench_evaluator(path, True)(sizes)
        check = True
    except Exception as exc:  # noqa: BLE001 - value-dependent code: size by inputs alone
        gpu = kernelbench_evaluator(path, False)(sizes)
        check = False
        note = (f"the reference does not run on the meta device ({_short(exc)}): the CPU "
                "shape's sizes were checked on the inputs only")
    evaluate = kernelbench_evaluator(path, check)
    fixed = {k: v for k, v in sizes.items() if k not in scalable}
    cpu_sizes, cpu, frozen = shrink(scalable, lambda s: evaluate({**fixed, **s}), target)
    return {"ok": True, "gpu": {"sizes": sizes, **gpu},
            "cpu": {"sizes": {**fixed, **cpu_sizes}, **cpu}, "frozen": frozen, "note": note}


# --- FlashInfer-Bench -----------------------------------------------------------------------------

def flashinfer_evaluator(item: dict, check_forward: bool) -> Evaluate:
    namespace: dict = {"torch": torch}
    exec(RANDOM_TENSOR, namespace)
    random = namespace["_random"]
    reference: dict = {}
    exec(compile(item["reference"], f"<definition {item['name']}>", "exec"), reference)
    run = reference["run"]
    constraints = [compile(c, "<constraint>", "eval") for c in item.get("constraints", [])]

    def evaluate(axes: dict) -> dict:
        for text, code in zip(item.get("constraints", []), constraints, strict=True):
            if not eval(code, {"__builtins__": {}}, dict(axes)):  # noqa: S307 - the definition's
                raise ValueError(f"constraint {text!r} fails")
        with on_meta():
            inputs = {name: random(tuple(axes[a] for a in shape), dtype, "meta")
                      for name, (shape, dtype) in item["tensors"].items()}
            if check_forward:
                with torch.no_grad():
                    run(**inputs, **item["scalars"])
        return {"bytes": _nbytes(inputs.values()), "input_bytes": _nbytes(inputs.values())}
    return evaluate


def probe_flashinfer(item: dict, target: int) -> dict:
    axes = dict(item["axes"])
    note = None
    try:
        flashinfer_evaluator(item, True)(axes)
        check = True
    except Exception as exc:  # noqa: BLE001
        check = False
        note = (f"the reference does not run on the meta device ({_short(exc)}): the CPU "
                "shape's axes were checked against the constraints only")
    evaluate = flashinfer_evaluator(item, check)
    cpu_axes, cpu, frozen = shrink(axes, evaluate, target)
    return {"ok": True, "cpu": {"sizes": cpu_axes, **cpu}, "frozen": frozen, "note": note}


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def main() -> int:
    request = json.loads(sys.stdin.read())
    probe = {"kernelbench": probe_kernelbench, "flashinfer": probe_flashinfer}[request["kind"]]
    results = []
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # problem code that prints stays off the answer
        for item in request["items"]:
            try:
                results.append(probe(item, request["cpu_bytes"]))
            except Exception as exc:  # noqa: BLE001 - one problem's failure is its own
                results.append({"ok": False, "error": _short(exc)})
    out.write(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
