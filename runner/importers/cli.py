"""`atrex import kernelbench SRC... --out DIR` and `atrex import flashinfer-bench DEF... --out DIR`.

Exit codes: 0 every source imported, 2 a usage error or any source that could not be imported
(each is listed; the others are still written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import DEFAULT_CPU_BYTES, ImportProblem, OpFiles, write_config, write_op

EXIT_OK, EXIT_USAGE = 0, 2

# KernelBench checks with atol = rtol = 1e-2 against a reference in the inputs' precision; the
# runner's float64 reference with fp32's default 1e-3 would fail TF32-class kernels it accepts.
KERNELBENCH_TOLERANCES = {"float32": {"atol": 1e-2, "rtol": 1e-2, "rel_l2": 1e-2}}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import", help="write other benchmarks' problems as atrex operator directories",
        description="Convert KernelBench problems or FlashInfer-Bench definitions into native "
        "operator directories (docs/import.md says what is carried over).")
    kinds = parser.add_subparsers(dest="kind", metavar="FORMAT")
    kinds.required = True
    kb = kinds.add_parser("kernelbench", help="KernelBench problem files (Model, get_inputs, "
                          "get_init_inputs)")
    kb.add_argument("sources", nargs="+", type=Path, metavar="SRC",
                    help="problem files, or directories searched for them (e.g. level1/)")
    kb.add_argument("--candidates", type=Path, metavar="DIR",
                    help="candidate kernels: <problem stem>.py, <stem>_kernel.py, or "
                    "KernelBench's level_<L>_problem_<N>_sample_<S>_kernel.py")
    fib = kinds.add_parser("flashinfer-bench", help="FlashInfer-Bench definitions (JSON) and "
                           "workloads (JSONL)")
    fib.add_argument("sources", nargs="+", type=Path, metavar="DEF",
                     help="definition files, or directories searched for them")
    fib.add_argument("--workloads", type=Path, action="append", default=[], metavar="PATH",
                     help="workload JSONL files or directories (default: the trace-set layout "
                     "beside each definition, workloads/<op_type>/<name>.jsonl)")
    for sub in (kb, fib):
        sub.add_argument("--out", type=Path, required=True, metavar="DIR",
                         help="where the operator directories go")
        sub.add_argument("--cpu-bytes", type=int, default=DEFAULT_CPU_BYTES, metavar="N",
                         help="input + parameter bytes the CPU shape is scaled down to "
                         f"(default {DEFAULT_CPU_BYTES})")
        sub.add_argument("--force", action="store_true", help="overwrite existing directories")
    kb.set_defaults(func=run_kernelbench)
    fib.set_defaults(func=run_flashinfer)


def run_kernelbench(args: argparse.Namespace) -> int:
    from .kernelbench import import_problems, problem_files

    try:
        files = problem_files(args.sources)
        if not files:
            raise ImportProblem(", ".join(map(str, args.sources)), "no KernelBench problem "
                                "files (a class Model and a get_inputs function)")
        ops, failures = import_problems(files, args.candidates, args.cpu_bytes)
    except ImportProblem as exc:
        return _error(str(exc))
    return _finish(args, ops, failures, KERNELBENCH_TOLERANCES)


def run_flashinfer(args: argparse.Namespace) -> int:
    from .flashinfer import definition_files, import_definitions

    try:
        files = definition_files(args.sources)
        if not files:
            raise ImportProblem(", ".join(map(str, args.sources)), "no FlashInfer-Bench "
                                "definitions (JSON with name, axes, inputs, reference)")
        ops, failures = import_definitions(files, args.workloads, args.cpu_bytes)
    except ImportProblem as exc:
        return _error(str(exc))
    return _finish(args, ops, failures, {})


def _finish(args, ops: list[OpFiles], failures: list[ImportProblem], tolerances) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    total, written = len(ops) + len(failures), 0
    for op in ops:
        try:
            path = write_op(args.out, op, args.force)
        except ImportProblem as exc:
            failures.append(exc)
            continue
        written += 1
        print(f"{path}: shapes {', '.join(op.shapes)}" + (" (with kernel.py)" if op.kernel
                                                          else ""))
        for note in op.notes:
            print(f"  note: {note}")
    pending = write_config(args.out, tolerances) if written and tolerances else None
    if pending:
        print(f"note: {args.out / 'atrex.toml'} exists; add these lines to it:\n{pending}")
    for failure in failures:
        print(f"atrex: error: {failure}", file=sys.stderr)
    print(f"imported {written} of {total} into {args.out}")
    return EXIT_USAGE if failures else EXIT_OK


def _error(message: str) -> int:
    print(f"atrex: error: {message}", file=sys.stderr)
    return EXIT_USAGE
