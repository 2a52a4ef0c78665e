"""`atrex check` and `atrex calibrate`.

Exit codes: 0 every operator passes, 1 any does not, 2 a usage or repository-format error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import FormatError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def register(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser(
        "check", help="evaluate a kernel repository: correctness, own-kernel share, roofline",
        description="Evaluate the operators of a kernel repository.")
    check.add_argument("path", nargs="?", default=".", help="repository or operator directory")
    check.add_argument("--op", action="append", dest="ops", metavar="NAME",
                       help="evaluate only this operator (repeatable)")
    check.add_argument("--json", type=Path, metavar="FILE", help="write the JSON report here")
    check.add_argument("--markdown", type=Path, metavar="FILE", help="write the Markdown report")
    check.add_argument("--plot", type=Path, metavar="FILE", help="write the roofline chart (PNG)")
    check.add_argument("--device", choices=("cpu", "cuda"), default=None,
                       help="default: cuda when a GPU is visible, else cpu")
    check.add_argument("--device-index", type=int, default=0, metavar="N")
    check.add_argument("--trials", type=_positive_int, default=None, metavar="K",
                       help="fresh random draws per shape (default: atrex.toml, else 3)")
    check.add_argument("--no-time", action="store_true", help="skip GPU timing")
    check.add_argument("--quiet", action="store_true", help="no progress bar or table")
    check.set_defaults(func=run_check)

    bench = subparsers.add_parser(
        "bench", help="time candidates against PyTorch eager and torch.compile baselines",
        description="Measure each operator's reference (eager, torch.compile) and the "
        "repository's candidate, interleaved on one GPU.")
    bench.add_argument("path", help="repository (e.g. benchmarks/suite)")
    bench.add_argument("--baselines", default="eager,compile,kb",
                       help="comma list drawn from eager, compile, kb (default: all three)")
    bench.add_argument("--op", action="append", dest="ops", metavar="NAME")
    bench.add_argument("--json", type=Path, metavar="FILE")
    bench.add_argument("--markdown", type=Path, metavar="FILE")
    bench.add_argument("--plot", type=Path, metavar="FILE")
    bench.add_argument("--device", choices=("cpu", "cuda"), default=None)
    bench.add_argument("--device-index", type=int, default=0, metavar="N")
    bench.add_argument("--compile-mode", default="max-autotune-no-cudagraphs")
    bench.add_argument("--timeout-s", type=float, default=None, metavar="S",
                       help="per-shape deadline (torch.compile autotuning can be slow)")
    bench.set_defaults(func=run_bench_command)

    calibrate = subparsers.add_parser(
        "calibrate", help="measure this GPU's copy bandwidth and matmul rates",
        description="Measure the ceilings of the visible GPU and cache them for later reports.")
    calibrate.add_argument("--device-index", type=int, default=0, metavar="N")
    calibrate.add_argument("--out", type=Path, metavar="FILE")
    calibrate.set_defaults(func=run_calibrate)

    from .roofline import register as register_roofline

    register_roofline(subparsers)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def run_check(args: argparse.Namespace) -> int:
    from .evaluate import EvalOptions
    from .repo import load_repo

    if args.device == "cuda" and not _cuda_available():
        return _usage_error("--device cuda: no CUDA GPU is visible on this machine")
    try:
        repo = load_repo(args.path, only_ops=args.ops)
        options = EvalOptions(device=args.device or "auto", device_index=args.device_index,
                              trials=args.trials, time=not args.no_time)
        report = _with_progress(repo, options, quiet=args.quiet)
    except FormatError as exc:
        return _usage_error(str(exc))
    _write_outputs(report, args)
    if not args.quiet:
        from rich.console import Console

        from .render import terminal_table

        # a log (CI, a pipe) gets a table wide enough to keep op and shape names whole
        console = Console(width=None if sys.stdout.isatty() else 140)
        console.print(terminal_table(report))
        for note in report.notes:
            console.print(f"[yellow]note:[/yellow] {note}")
        console.print(f"repository score: {report.score if report.score is not None else 'n/a'}")
    return EXIT_PASS if report.status.value == "pass" else EXIT_FAIL


def _with_progress(repo, options, quiet: bool):
    from .evaluate import evaluate_repo

    if quiet:
        return evaluate_repo(repo, options)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    device = options.resolved_device()
    total = sum(1 for op in repo.ops for s in op.shapes if device in s.targets)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total} shapes"), TimeElapsedColumn(), transient=True) as progress:
        task = progress.add_task("evaluating", total=total)
        seen: set[tuple[str, str]] = set()

        def on_progress(op: str, shape: str | None, label: str | None) -> None:
            if shape is None:
                progress.update(task, description=f"{op}: loading")
                return
            if (op, shape) not in seen:
                if seen:
                    progress.advance(task)
                seen.add((op, shape))
            progress.update(task, description=f"{op} / {shape}")

        report = evaluate_repo(repo, options, on_progress)
        progress.update(task, completed=total)
    return report


def _write_outputs(report, args) -> None:
    from .render import markdown

    if args.json:
        _write(args.json, report.to_json() + "\n")
    if args.markdown:
        _write(args.markdown, markdown(report))
    if args.plot:
        from .plot import roofline_png

        roofline_png(report, args.plot)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_bench_command(args: argparse.Namespace) -> int:
    import json

    from .bench import BASELINES, bench_document, bench_markdown, run_bench
    from .evaluate import EvalOptions
    from .repo import load_repo

    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown or not baselines:
        return _usage_error(f"--baselines: unknown {unknown}; choose from {', '.join(BASELINES)}")
    if args.device == "cuda" and not _cuda_available():
        return _usage_error("--device cuda: no CUDA GPU is visible on this machine")
    try:
        repo = load_repo(args.path, only_ops=args.ops)
        options = EvalOptions(device=args.device or "auto", device_index=args.device_index,
                              timeout_s=args.timeout_s)
        reports = run_bench(repo, baselines, options, args.compile_mode,
                            progress=lambda op, shape, label: print(
                                f"bench {op} / {shape or 'load'} / {label or '-'}", flush=True))
    except FormatError as exc:
        return _usage_error(str(exc))
    doc = bench_document(repo, reports, baselines, args.compile_mode)
    text = bench_markdown(doc)
    if args.json:
        _write(args.json, json.dumps(doc, indent=2) + "\n")
    if args.markdown:
        _write(args.markdown, text)
    if args.plot:
        from .plot import roofline_png

        roofline_png(reports, args.plot)
    print(text)
    return EXIT_PASS


def run_calibrate(args: argparse.Namespace) -> int:
    if not _cuda_available():
        return _usage_error("atrex calibrate needs a CUDA GPU; none is visible")
    from .calibrate import calibrate

    result = calibrate(args.device_index, args.out)
    print(f"{result['gpu']}: copy {result['bandwidth_tbps']:.2f} TB/s; " + ", ".join(
        f"{k} {v:.0f} TFLOP/s" for k, v in result["tflops"].items()) + f" -> {result['path']}")
    return EXIT_PASS


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _usage_error(message: str) -> int:
    print(f"atrex: error: {message}", file=sys.stderr)
    return EXIT_USAGE
