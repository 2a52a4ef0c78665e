"""Counting the work of an operator's shapes in a process of its own (`atrex roofline`).

The reference and input generator are the repository's code: they run in a child process with
the judge's scrubbed environment, never in the caller. The child prints one JSON line per shape:
the counted FLOPs by class and operation, and the bytes read and written per tensor with the
rule that counted them.

Modes: ``cuda`` runs the reference on the GPU; ``cpu`` runs it on the CPU under
:class:`atrex.runner.work.hybrid.Hybrid`, where large floating tensors are shapes on the meta
device, so GPU-sized shapes can be counted on a laptop (exactly: what decides the touched rows -
routing, block tables, lengths - is computed for real).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..modload import load_module
from .lineage import TensorCount, TouchedBytes


@dataclass
class CountJob:
    op_dir: str
    shapes: list[dict]  # {"id", "init_kwargs", "input_kwargs"}
    mode: str = "cpu"  # "cpu" (hybrid) or "cuda"
    flop_dtype_class: str | None = None
    mutates: list[str] = field(default_factory=list)
    seed: int = 0
    real_limit: int = 1 << 22


@dataclass
class ShapeCount:
    """What the child reports for one shape."""

    shape: str
    flops: dict[str, float] = field(default_factory=dict)
    ops: list[dict] = field(default_factory=list)  # OpWork as dicts
    reads: list[dict] = field(default_factory=list)  # TensorCount as dicts
    writes: list[dict] = field(default_factory=list)
    conservative_ops: list[str] = field(default_factory=list)
    tensor_class: str | None = None
    error: str | None = None

    @property
    def touched(self) -> TouchedBytes:
        return TouchedBytes([TensorCount(**r) for r in self.reads],
                            [TensorCount(**w) for w in self.writes], self.conservative_ops)


def count_in_subprocess(job: CountJob, timeout_s: float | None = None,
                        device_index: int = 0) -> dict[str, ShapeCount]:
    """Run the child; shapes it did not report (a crash, the deadline) come back with an
    error."""
    from ..sandbox import scrubbed_env

    with tempfile.TemporaryDirectory(prefix="atrex-roofline-") as scratch:
        env = scrubbed_env(job.mode, device_index, Path(scratch))
        try:
            done = subprocess.run([sys.executable, "-m", "atrex.runner.work.audit"],
                                  input=json.dumps(asdict(job)), capture_output=True, text=True,
                                  env=env, timeout=timeout_s, cwd=scratch)
            lines, tail = done.stdout.splitlines(), done.stderr[-2000:]
            problem = f"the counting process exited with {done.returncode}: {tail.strip()}"
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            lines, problem = out.splitlines(), f"no result within {timeout_s:g} s"
    results: dict[str, ShapeCount] = {}
    for line in lines:
        if line.startswith("{"):
            data = json.loads(line)
            results[data["shape"]] = ShapeCount(**data)
    for shape in job.shapes:
        results.setdefault(shape["id"], ShapeCount(shape["id"], error=problem))
    return results


# ---- the child ------------------------------------------------------------------------------


def count_shape(job: CountJob, reference, inputs_module, shape: dict) -> ShapeCount:
    import torch

    from .counter import WorkCounter
    from .hybrid import Hybrid

    with ExitStack() as stack:
        if job.mode == "cuda":
            device = torch.device("cuda")
        else:
            device = torch.device("cpu")
            stack.enter_context(Hybrid(real_limit=job.real_limit))
        torch.manual_seed(job.seed)
        model = reference.Model(**(shape.get("init_kwargs") or {}))
        if isinstance(model, torch.nn.Module) and job.mode == "cuda":
            model = model.to(device)
        torch.manual_seed(job.seed)
        inputs = inputs_module._make_inputs(**shape["input_kwargs"])
        counter = WorkCounter(tensor_class=job.flop_dtype_class)
        counter.add_inputs(inputs, model)
        with torch.no_grad(), counter:
            out = model(**inputs)
        named = _named_outputs(out)
        named.update({f"input:{n}": inputs[n] for n in job.mutates if n in inputs})
        work = counter.result(named)
    return ShapeCount(shape["id"], flops=work.flops, ops=[asdict(o) for o in work.ops],
                      reads=[asdict(c) for c in work.touched.reads],
                      writes=[asdict(c) for c in work.touched.writes],
                      conservative_ops=work.touched.conservative_ops,
                      tensor_class=work.tensor_class)


def _named_outputs(out) -> dict:
    import torch

    if isinstance(out, torch.Tensor):
        return {"out": out}
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items() if isinstance(v, torch.Tensor)}
    if isinstance(out, list | tuple):
        return {f"out{i}": v for i, v in enumerate(out) if isinstance(v, torch.Tensor)}
    return {}


def main() -> int:
    job = CountJob(**json.loads(sys.stdin.read()))
    op_dir = Path(job.op_dir)
    tag = uuid.uuid4().hex[:8]
    sys.path.insert(0, str(op_dir))
    reference = load_module(op_dir / "reference.py", f"_atrex_reference_{tag}")
    inputs_module = load_module(op_dir / "input.py", f"_atrex_input_{tag}")
    for shape in job.shapes:
        try:
            result = count_shape(job, reference, inputs_module, shape)
        except Exception as exc:  # noqa: BLE001 - one shape's failure is reported, not fatal
            result = ShapeCount(shape["id"], error=f"{type(exc).__name__}: {exc}"[:2000])
        print(json.dumps(asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
