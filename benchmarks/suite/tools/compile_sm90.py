"""Compile every Triton kernel the suite candidates launch for an H100/H200 (sm_90a), on a machine
without a GPU, and report registers, spills and shared memory (ptxas -v), and ptxas's performance
advisories (e.g. C7515: wgmma instructions serialized).

The interpreter proves the kernels compute the right thing; this proves the same code goes through
Triton's GPU compiler (front end -> TTGIR -> LLVM -> PTX -> cubin with the bundled ptxas) and shows
what would bound occupancy. It runs each op's candidate on its CPU shapes (or --shape ids) with
`JITFunction.run` replaced by a compile of the launch's exact signature and constexprs; nothing is
launched, so the outputs are not meaningful.

    python benchmarks/suite/tools/compile_sm90.py [op ...] [--gpu-shapes] [--set NAME=VALUE ...]

--set overrides a kernel module's launch constant (a Python literal: --set USE_TMA=True) in every
op named, to compile a variant a sweep would try.
--gpu-shapes compiles with the real (cuda) shape arguments instead of the CPU variants: the inputs
are allocated on the CPU, so it needs memory for them (the large ones take a few GB).
The local Triton may be newer than the GPU machine's (3.9 here, 3.6 there): a pass is strong
evidence, not proof, and register counts differ between the two (paged_decode_gqa's split kernel:
103 under 3.9, 96 under 3.6, as ncu measured on the GPU). For the device's own compiler, run this
file from a second environment:
    python3 -m venv /tmp/venv36 && /tmp/venv36/bin/pip install torch==2.13.0 triton==3.6.0 numpy
    /tmp/venv36/bin/python benchmarks/suite/tools/compile_sm90.py OP --gpu-shapes
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent
ROOT = SUITE.parent.parent


def _dtype_name(t) -> str:
    import torch

    names = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
             torch.float64: "fp64", torch.int32: "i32", torch.int64: "i64", torch.int16: "i16",
             torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1",
             torch.float8_e4m3fn: "fp8e4nv", torch.float8_e5m2: "fp8e5"}
    return names[t.dtype]


def _signature(fn, args, kwargs):
    import torch
    import triton.language as tl

    sig = inspect.signature(fn.fn)
    bound = sig.bind(*args, **kwargs)
    signature, constexprs, attrs = {}, {}, {}
    for i, (name, param) in enumerate(sig.parameters.items()):
        value = bound.arguments.get(name, param.default)
        if param.annotation is tl.constexpr or (isinstance(param.annotation, str)
                                                 and "constexpr" in param.annotation):
            signature[name] = "constexpr"
            constexprs[name] = value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + _dtype_name(value)
            attrs[(i,)] = [["tt.divisibility", 16]]  # torch allocations are 16-byte aligned
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i64" if abs(value) >= 2 ** 31 else "i32"
            if value % 16 == 0 and value != 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        elif value is None:
            signature[name] = "constexpr"
            constexprs[name] = None
        else:
            raise TypeError(f"{fn.fn.__name__}: cannot type argument {name}={value!r}")
    return signature, constexprs, attrs


def _ptxas_info(ptx: str, arch: str) -> dict:
    from triton.backends.nvidia import compiler as nv

    try:
        ptxas = nv.get_ptxas(90).path
    except TypeError:
        ptxas = nv.get_ptxas().path
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ptx"
        path.write_text(ptx)
        proc = subprocess.run([ptxas, "-v", f"--gpu-name={arch}", str(path), "-o",
                               str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    text = proc.stderr + proc.stdout
    regs = re.search(r"Used (\d+) registers", text)
    spill = re.search(r"(\d+) bytes spill stores", text)
    return {"registers": int(regs.group(1)) if regs else None,
            "spill_store_bytes": int(spill.group(1)) if spill else None,
            "advisories": _advisories(text)}


def _loop_barriers(ptx: str) -> int:
    """The most CTA barriers (bar.sync) in one innermost loop body of the PTX (a loop is a branch
    back to an earlier label; innermost, one whose body holds no other loop). In a streaming
    loop without tensor-core pipelining each barrier is a cross-warp step per iteration, most
    often a layout conversion through shared memory that an operand's shape forced (the
    sampling select's pairwise steps paid 4 and 2 until their candidates were loaded as tiles
    instead of converted vectors). Compile with --gpu-shapes to see the loops the GPU runs:
    the loads' vector width, and so the conversions, can differ at the CPU shapes."""
    lines = ptx.splitlines()
    labels: dict[str, int] = {}
    spans = []
    for i, line in enumerate(lines):
        label = re.match(r"^(\$L__BB\d+_\d+):", line)
        if label:
            labels[label.group(1)] = i
        branch = re.search(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if branch and branch.group(1) in labels:
            spans.append((labels[branch.group(1)], i))
    innermost = [(a, b) for a, b in spans
                 if not any(a <= c and d <= b and (c, d) != (a, b) for c, d in spans)]
    return max((sum("bar.sync" in line for line in lines[a:b]) for a, b in innermost),
               default=0)


def _advisories(ptxas_output: str) -> list[str]:
    """ptxas's performance advisories by code, e.g. C7515 (wgmma serialized: the tensor-core
    instructions of a pipeline stage wait for each other), which no register count shows."""
    return sorted(set(re.findall(r"\((C7\d{3})\) Potential Performance Loss", ptxas_output)))


class Compiler:
    def __init__(self, dump: Path | None = None):
        self.results: list[dict] = []
        self.seen: set = set()
        self.dump = dump

    def install(self):
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.runtime.jit import JITFunction

        target = GPUTarget("cuda", 90, 32)
        compiler = self

        def run(fn, *args, grid, warmup, **kwargs):
            options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "num_ctas",
                                                   "maxnreg", "launch_pdl") if k in kwargs}
            signature, constexprs, attrs = _signature(fn, args, kwargs)
            key = (fn.fn.__qualname__, json.dumps(signature, sort_keys=True),
                   repr(sorted(constexprs.items())), repr(sorted(options.items())))
            if key in compiler.seen:
                return None
            compiler.seen.add(key)
            entry = {"kernel": fn.fn.__name__, "options": options,
                     "constexprs": {k: v for k, v in constexprs.items()
                                    if isinstance(v, int | float | bool)}}
            try:
                src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
                compiled = triton.compile(src, target=target, options=options)
                entry["shared_bytes"] = compiled.metadata.shared
                entry.update(_ptxas_info(compiled.asm["ptx"], "sm_90a"))
                entry["loop_barriers"] = _loop_barriers(compiled.asm["ptx"])
                entry["ok"] = True
                if compiler.dump is not None:
                    compiler.dump.mkdir(parents=True, exist_ok=True)
                    stem = f"{fn.fn.__name__}-{len(compiler.results)}"
                    (compiler.dump / f"{stem}.ptx").write_text(compiled.asm["ptx"])
                    (compiler.dump / f"{stem}.ttgir").write_text(compiled.asm["ttgir"])
            except Exception as exc:  # noqa: BLE001 - report every failure, keep going
                entry["ok"] = False
                entry["error"] = f"{type(exc).__name__}: {str(exc).strip()[:2000]}"
            compiler.results.append(entry)
            return None

        JITFunction.run = run


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ops", nargs="*")
    parser.add_argument("--gpu-shapes", action="store_true")
    parser.add_argument("--dump", metavar="DIR", help="write each kernel's PTX and TTGIR there")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a launch constant of the kernel modules, as a Python literal")
    args = parser.parse_args(argv)
    try:
        constants = {k: ast.literal_eval(v) for k, v in (a.split("=", 1) for a in args.set)}
    except (ValueError, SyntaxError) as exc:
        parser.error(f"--set takes NAME=LITERAL: {exc}")
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path.insert(0, str(ROOT))
    import torch

    from atrex.runner.executor.devmap import CudaToCpu

    compiler = Compiler(dump=Path(args.dump) if args.dump else None)
    compiler.install()
    CudaToCpu().__enter__()
    ops = args.ops or sorted(p.parent.name for p in SUITE.glob("*/kernel.py")
                             if (p.parent / "shapes.json").is_file())
    failed = 0
    for op in ops:
        op_dir = SUITE / op
        shapes = json.loads((op_dir / "shapes.json").read_text())
        target = "cuda" if args.gpu_shapes else "cpu"
        inputs_mod = _load(op_dir / "input.py", f"_cc_inputs_{op}")
        kernel_mod = _load(op_dir / "kernel.py", f"_cc_kernel_{op}")
        for name, value in constants.items():
            if not hasattr(kernel_mod, name):
                parser.error(f"--set {name}: {op}/kernel.py has no such constant")
            setattr(kernel_mod, name, value)
        if hasattr(kernel_mod, "_use_pdl"):
            # the inputs live on the CPU here; compile the launch an sm_90 GPU would make
            kernel_mod._use_pdl = lambda device, module=kernel_mod: module.PDL
        before = len(compiler.results)
        for sid, shape in shapes.items():
            if target not in shape.get("targets", ["cpu", "cuda"]):
                continue
            torch.manual_seed(0)
            inputs = inputs_mod._make_inputs(**shape["input_kwargs"])
            model = kernel_mod.Model(**(shape.get("init_kwargs") or {}))
            with torch.no_grad():
                try:
                    model(**inputs)
                except Exception as exc:  # noqa: BLE001
                    compiler.results.append({"kernel": f"{op}:{sid} launcher", "ok": False,
                                             "error": f"{type(exc).__name__}: {exc}"})
        for entry in compiler.results[before:]:
            status = "ok " if entry["ok"] else "FAIL"
            failed += not entry["ok"]
            advisories = " ".join(entry.get("advisories") or [])
            detail = (f"regs {entry.get('registers')} spills {entry.get('spill_store_bytes')} "
                      f"smem {entry.get('shared_bytes')} loop-barriers "
                      f"{entry.get('loop_barriers')}"
                      + (f" ptxas-advisory {advisories}" if advisories else "")
                      if entry["ok"] else entry["error"])
            print(f"{status} {op:28s} {entry['kernel']:32s} {entry.get('options', {})} {detail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
