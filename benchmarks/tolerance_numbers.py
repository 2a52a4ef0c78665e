"""The errors behind the tolerance rule for one operator and shape: the reference at its native
dtype, the library peer and the kernel, each against the float64 oracle on the same inputs
(seeds 0..N-1), as the judge measures them (runner/judge/compare.py: e = the worst element's
share of atol + rtol |ref|, 1 is the configured bound; max abs; relative L2).

    TRITON_INTERPRET=1 python3 benchmarks/tolerance_numbers.py [OP] [SHAPE] [--seeds N]

On a machine without a GPU the inputs' cuda device maps to the CPU and Triton interprets.
Defaults: prefill_attention_gqa cpu-varlen, 5 seeds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atrex.runner.config import DEFAULT_TOLERANCES  # noqa: E402
from atrex.runner.dtypes import canonical_dtype  # noqa: E402
from atrex.runner.judge.compare import _errors  # noqa: E402


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _device_context():
    if torch.cuda.is_available():
        import contextlib

        return contextlib.nullcontext()
    from atrex.runner.executor.devmap import CudaToCpu

    return CudaToCpu()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", nargs="?", default="prefill_attention_gqa")
    parser.add_argument("shape", nargs="?", default="cpu-varlen")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    op = ROOT / "benchmarks" / "suite" / args.op
    shape = json.loads((op / "shapes.json").read_text())[args.shape]
    inputs_module = _load(op / "input.py", "numbers_input")
    contestants = {"eager": _load(op / "reference.py", "numbers_reference")}
    for name, file in (("library", "library.py"), ("kb", "kernel.py")):
        if (op / file).is_file():
            contestants[name] = _load(op / file, f"numbers_{name}")
    init = shape.get("init_kwargs") or {}
    models = {name: module.Model(**init) for name, module in contestants.items()}
    oracle = contestants["eager"].Model(**init)
    print(f"{args.op} / {args.shape} ({'cuda' if torch.cuda.is_available() else 'CPU'}, torch "
          f"{torch.__version__}): e / max abs / relative L2 against the float64 oracle")
    for seed in range(args.seeds):
        torch.manual_seed(seed)
        with _device_context():
            inputs = inputs_module._make_inputs(**shape["input_kwargs"])
            upcast = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
                      for k, v in inputs.items()}
            with torch.no_grad():
                ref = oracle.double()(**upcast)
                cells = []
                for name, model in models.items():
                    out = model(**{k: v.clone() if torch.is_tensor(v) else v
                                   for k, v in inputs.items()})
                    tol = DEFAULT_TOLERANCES[canonical_dtype(str(out.dtype).removeprefix("torch."))]
                    e = _errors(out.double().flatten(), ref.flatten(), tol)
                    cells.append(f"{name} {e.ratio:.3f} / {e.max_abs:.4f} / {e.rel_l2:.4f}")
        print(f"seed {seed}: " + " | ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
