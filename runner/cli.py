"""`atrex check`, `atrex bench` and `atrex calibrate`.

Exit codes: 0 every operator passes, 1 any does not, 2 a usage or repository-format error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .clihelp import HelpFormatter
from .errors import FormatError, ResumeError

EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

PATH_HELP = ("kernel repository or operator directory (default: the current directory). Without "
             "an atrex.toml it is searched recursively: every directory holding a shapes.json, "
             "a reference.py with class Model or an input.py with _make_inputs is an operator, "
             "and one that lacks any of reference.py, input.py, shapes.json, kernel.py is "
             "reported as malformed; with one, the operators are the directories under its "
             "[repo] ops_root")
CHECK_EPILOG = """\
exit status:
  0  every operator passes
  1  at least one operator is not `pass` (the reason of each is printed under the table)
  2  usage error, or an operator is malformed (each one's file, field and problem on stderr;
     the other operators are still evaluated)
  130  interrupted: the --json report holds the operators that finished (it is rewritten after
     every operator)

`-` as FILE writes that document to standard output; the table and verdict then go to
standard error. Progress goes to standard error: a live bar on a terminal, one line per
operator and shape otherwise."""
BENCH_EPILOG = """\
exit status:
  0  the bench ran (each contestant's status per shape is in the table and the reports)
  2  usage error, or the repository is malformed

`-` as FILE writes that document to standard output; the table then goes to standard error."""


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_check(subparsers)
    _register_bench(subparsers)
    _register_calibrate(subparsers)


def _register_check(subparsers: argparse._SubParsersAction) -> None:
    check = subparsers.add_parser(
        "check", help="evaluate a kernel repository: correctness, own-kernel share, roofline",
        description="Evaluate the operators of a kernel repository: correctness over fresh "
        "random inputs, own-kernel share (fallback detection), anti-cheat checks and, on a GPU, "
        "timing against the roofline.", epilog=CHECK_EPILOG,
        formatter_class=HelpFormatter)
    check.add_argument("path", nargs="?", default=".", help=PATH_HELP)
    check.add_argument("--op", action="append", dest="ops", metavar="NAME",
                       help="evaluate only this operator (repeatable; default: all)")
    _add_device_options(check)
    check.add_argument("--trials", type=_positive_int, default=None, metavar="K",
                       help="fresh random draws per shape (default: atrex.toml, else 3)")
    check.add_argument("--no-time", action="store_true",
                       help="skip GPU timing (correctness and fallback checks only)")
    _add_output_options(check)
    check.add_argument("--quiet", action="store_true",
                       help="no progress, table or reasons: only the one-line verdict")
    cpu_safety_options(check)
    check.set_defaults(func=run_check)


def _register_bench(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench", help="time candidates against PyTorch eager, torch.compile and library "
        "baselines",
        description="Measure each operator's reference (eager, torch.compile), the library a "
        "serving team would call (library.py) and the repository's candidate, interleaved on "
        "one GPU.", epilog=BENCH_EPILOG,
        formatter_class=HelpFormatter)
    bench.add_argument("path", help="repository (e.g. benchmarks/suite); searched as for check")
    bench.add_argument("--baselines", default="eager,compile,library,kb", metavar="LIST",
                       help="comma list of contestants drawn from eager (the reference as "
                       "written), compile (the reference through torch.compile), library (the "
                       "op directory's library.py; absent, with the reason, where there is "
                       "none or it cannot run here) and kb (the repository's kernel.py) "
                       "(default: eager,compile,library,kb)")
    bench.add_argument("--op", action="append", dest="ops", metavar="NAME",
                       help="bench only this operator (repeatable; default: all)")
    _add_device_options(bench)
    bench.add_argument("--compile-mode", default="max-autotune-no-cudagraphs", metavar="MODE",
                       help="torch.compile mode of the compile baseline (default: "
                       "max-autotune-no-cudagraphs)")
    bench.add_argument("--compile-cache", type=Path, default=None, metavar="DIR",
                       help="Inductor's cache directory for the compile baseline, kept between "
                       "runs: max-autotune's first choice is then reused, so the compile column "
                       "repeats (default: none, every run compiles and autotunes afresh)")
    bench.add_argument("--timeout-s", type=float, default=None, metavar="S",
                       help="per-shape deadline in seconds (default: atrex.toml, per op; "
                       "torch.compile autotuning can be slow)")
    bench.add_argument("--resume", action="store_true",
                       help="continue the run whose --json document FILE is: the operators it "
                       "finished (every contestant's report is kept beside it, in "
                       "FILE.reports.json with FILE's suffix replaced) are not run again, and "
                       "one document covers both parts; refused if the GPU, driver or "
                       "software differ. Without that file the run starts afresh")
    _add_output_options(bench, json_what="the bench document (JSON)")
    bench.set_defaults(func=run_bench_command)


def _register_calibrate(subparsers: argparse._SubParsersAction) -> None:
    calibrate = subparsers.add_parser(
        "calibrate", help="measure this GPU's copy bandwidth, matmul rates and launch floor",
        description="Measure the ceilings of the visible GPU and cache them for later reports "
        "(the 'measured' roofline next to the datasheet one), and its launch floor: the time "
        "per call of an empty kernel replayed in a CUDA graph, against which launch-bound "
        "shapes are also shown, and the floors of a kernel reading one cold line from memory "
        "(plain, and after an index read), below which no kernel that reads its input goes.",
        epilog="exit status: 0 measured, 2 no CUDA GPU is visible",
        formatter_class=HelpFormatter)
    calibrate.add_argument("--device-index", type=int, default=0, metavar="N",
                           help="CUDA device to measure (default 0)")
    calibrate.add_argument("--out", type=Path, metavar="FILE",
                           help="write the measurement here instead of the per-GPU cache that "
                           "reports read (`-`: standard output)")
    calibrate.set_defaults(func=run_calibrate)

    from .roofline import register as register_roofline

    register_roofline(subparsers)


def _add_device_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="where to run (default: cuda when a GPU is visible, else cpu)")
    parser.add_argument("--device-index", type=int, default=0, metavar="N",
                        help="CUDA device index (default 0)")


def _add_output_options(parser: argparse.ArgumentParser,
                        json_what: str = "the JSON report (schema in runner/model.py)") -> None:
    out = parser.add_argument_group("outputs (FILE `-`: standard output)")
    out.add_argument("--json", type=Path, metavar="FILE", help=f"write {json_what}")
    out.add_argument("--markdown", type=Path, metavar="FILE",
                     help="write the Markdown report (PR comment / job summary)")
    out.add_argument("--plot", type=Path, metavar="FILE",
                     help="write the roofline chart (PNG); without GPU timing, the chart of "
                     "what was checked (statuses, own-kernel share, error)")
    out.add_argument("--bars", type=Path, metavar="FILE",
                     help="write the roofline fraction per operator and shape, sorted by "
                     "GPU-hours at stake (PNG); without GPU timing, the chart of what was checked")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def cpu_safety_options(parser: argparse.ArgumentParser) -> None:
    """check's options for running big repositories on a small machine (issue 17)."""
    parser.add_argument("--timeout-s", type=float, default=None, metavar="S",
                        help="per-shape deadline in seconds (default: atrex.toml "
                        "thresholds.timeout_s, else 300)")
    parser.add_argument("--max-shapes", type=_positive_int, default=None, metavar="N",
                        help="per operator, only the N shapes with the fewest input bytes "
                        "(default: all)")
    parser.add_argument("--memory-budget", type=_positive_float, default=None, metavar="GB",
                        help="CPU runs: skip (status `skipped`, with the reason) a shape whose "
                        "inputs and float64 reference would need more memory (default: half "
                        "of this machine's memory)")


def _outputs(args: argparse.Namespace) -> dict[str, Path | None]:
    return {"--json": args.json, "--markdown": args.markdown, "--plot": args.plot,
            "--bars": args.bars}


def run_check(args: argparse.Namespace) -> int:
    from . import keep
    from .evaluate import EvalOptions
    from .output import human_stream, stdout_conflict
    from .repo import load_repo

    if problem := stdout_conflict(_outputs(args)):
        return _usage_error(problem)
    if args.device == "cuda" and not _cuda_available():
        return _usage_error("--device cuda: no CUDA GPU is visible on this machine")
    partial = keep.PartialReport(args.json, args.markdown)
    repo = None
    try:
        # one malformed operator is that operator's format_error; the others still run
        repo = load_repo(args.path, only_ops=args.ops, strict=False)
        options = EvalOptions(device=args.device or "auto", device_index=args.device_index,
                              trials=args.trials, time=not args.no_time,
                              timeout_s=args.timeout_s, max_shapes=args.max_shapes,
                              memory_budget_bytes=int(args.memory_budget * 1024 ** 3)
                              if args.memory_budget else None)
        report = _evaluate_with_progress(repo, options, args.quiet, partial.update)
    except FormatError as exc:
        return _usage_error(str(exc))
    except BaseException as exc:  # Ctrl-C or a crash mid-run: keep what finished, then stop
        kept = partial.interrupted(exc, [op.name for op in repo.ops] if repo else [])
        print(f"atrex: the run stopped ({type(exc).__name__}); "
              + ("the finished operators' report was written" if kept and args.json else
                 "no report file was requested (--json)" if kept else "nothing had finished"),
              file=sys.stderr)
        if isinstance(exc, KeyboardInterrupt):
            return keep.EXIT_INTERRUPTED
        raise
    _write_outputs(report, args)
    _print_summary(report, human_stream(_outputs(args)), args.quiet)
    for line in keep.format_error_lines(report):
        print(line, file=sys.stderr)
    return keep.exit_code(report)


def _evaluate_with_progress(repo, options, quiet: bool, on_partial=None):
    from .evaluate import evaluate_repo
    from .termout import progress

    with progress(_shape_count(repo, options), quiet, prefix="atrex check") as on_progress:
        return evaluate_repo(repo, options, on_progress, on_partial=on_partial)


def _shape_count(repo, options) -> int:
    device = options.resolved_device()
    return sum(1 for op in repo.ops for s in op.shapes if device in s.targets)


def _print_summary(report, stream, quiet: bool) -> None:
    from .termout import print_reasons, reasons, verdict_line

    console = _console(stream)
    if not quiet:
        from .render import terminal_table

        console.print(terminal_table(report))
        print_reasons(console, reasons(report))
        for note in report.notes:
            console.print(f"[yellow]note:[/yellow] {note}")
    console.print(verdict_line(report), markup=False, highlight=False, soft_wrap=True)


def _console(stream):
    from rich.console import Console

    # a log (CI, a pipe) gets a table wide enough to keep op and shape names whole
    return Console(file=stream, width=None if stream.isatty() else 140)


def _write_outputs(report, args) -> None:
    from .output import write_text
    from .render import markdown

    if args.json:
        write_text(args.json, report.to_json() + "\n")
    if args.markdown:
        write_text(args.markdown, markdown(report))
    _write_figures(report, args)


def _write_figures(reports, args) -> None:
    """`reports`: one Report, or {label: Report} for several contestants."""
    if args.plot:
        from .plot import roofline_png

        roofline_png(reports, args.plot)
    if args.bars:
        from .plot import fractions_png

        fractions_png(reports, args.bars)


def run_bench_command(args: argparse.Namespace) -> int:
    from .bench import BASELINES, run_bench
    from .evaluate import EvalOptions
    from .output import is_stdout, stdout_conflict
    from .repo import load_repo
    from .termout import progress

    baselines = [b.strip() for b in args.baselines.split(",") if b.strip()]
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown or not baselines:
        return _usage_error(f"--baselines: unknown {unknown}; choose from {', '.join(BASELINES)}")
    if problem := stdout_conflict(_outputs(args)):
        return _usage_error(problem)
    if args.device == "cuda" and not _cuda_available():
        return _usage_error("--device cuda: no CUDA GPU is visible on this machine")
    if args.resume and (not args.json or is_stdout(args.json)):
        return _usage_error("--resume continues the run of a --json FILE; give one")
    try:
        repo = load_repo(args.path, only_ops=args.ops)
        keeper = _bench_keeper(repo, baselines, args)
        todo = [op.name for op in repo.ops if op.name not in keeper.earlier.finished_ops()]
        if todo != [op.name for op in repo.ops]:
            print(f"atrex bench: resuming {args.json}: {len(repo.ops) - len(todo)} operators "
                  f"done, {len(todo)} to run", file=sys.stderr)
        options = EvalOptions(device=args.device or "auto", device_index=args.device_index,
                              timeout_s=args.timeout_s)
        fresh = {}
        if todo or not keeper.earlier.reports:
            part = load_repo(args.path, only_ops=todo)
            with progress(_shape_count(part, options), prefix="atrex bench") as on_progress:
                fresh = run_bench(part, baselines, options, args.compile_mode,
                                  progress=on_progress,
                                  on_partial=_partial_bench_writer(repo, baselines, args, keeper),
                                  compile_cache=_compile_cache(args))
    except (FormatError, ResumeError) as exc:
        return _usage_error(str(exc))
    _finish_bench(repo, keeper, fresh, baselines, args)
    return EXIT_PASS


def _compile_cache(args) -> Path | None:
    return args.compile_cache.resolve() if getattr(args, "compile_cache", None) else None


def _bench_keeper(repo, baselines: list[str], args):
    """The earlier parts of a resumed run (none for a fresh one) and where the state is kept."""
    import datetime as dt

    from .benchresume import BenchState, Keeper, load_state, state_path
    from .output import is_stdout

    path = None if not args.json or is_stdout(args.json) else state_path(args.json)
    earlier = BenchState(baselines, args.compile_mode)
    if args.resume and path.is_file():
        earlier = load_state(path, baselines, args.compile_mode)
    elif args.resume:
        print(f"atrex bench: --resume: no {path} yet, so the run starts afresh", file=sys.stderr)
    return Keeper(repo, earlier, path, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))


def _partial_bench_writer(repo, baselines: list[str], args, keeper):
    """After every operator, the bench document so far (`complete` false) replaces the --json
    file atomically, and the reports beside it: a run cut short keeps every finished operator's
    rows, and `--resume` goes on from there."""
    import json

    from .bench import bench_document
    from .keep import write_atomic

    if keeper.path is None:  # no --json file: nothing to rewrite
        return None

    def write(fresh) -> None:
        reports = keeper.keep(fresh)
        if any(report.ops for report in reports.values()):
            doc = bench_document(repo, reports, baselines, args.compile_mode, complete=False,
                                 parts=keeper.parts(fresh), compile_cache=_compile_cache(args))
            write_atomic(args.json, json.dumps(doc, indent=2) + "\n")
    return write


def _finish_bench(repo, keeper, fresh, baselines: list[str], args) -> None:
    import json

    from .bench import bench_document, bench_markdown
    from .output import human_stream, write_text
    from .termout import print_reasons, reasons

    reports = keeper.keep(fresh) if fresh else keeper.earlier.reports
    parts = keeper.parts(fresh) if fresh else keeper.earlier.sessions
    doc = bench_document(repo, reports, baselines, args.compile_mode, parts=parts,
                         compile_cache=_compile_cache(args))
    text = bench_markdown(doc)
    if args.json:
        write_text(args.json, json.dumps(doc, indent=2) + "\n")
    if args.markdown:
        write_text(args.markdown, text)
    _write_figures(reports, args)
    stream = human_stream(_outputs(args))
    print(text, file=stream)
    print_reasons(_console(stream), [r for label in baselines if label in reports
                                     for r in reasons(reports[label], label)])


def run_calibrate(args: argparse.Namespace) -> int:
    if not _cuda_available():
        return _usage_error("atrex calibrate needs a CUDA GPU; none is visible")
    from .calibrate import calibrate
    from .output import human_stream

    result = calibrate(args.device_index, args.out)
    by_size = ", ".join(f"{int(n) >> 20} MB {tbps:.2f}"
                        for n, tbps in result.get("copy_tbps_by_bytes", {}).items())
    print(f"{result['gpu']}: copy {result['bandwidth_tbps']:.2f} TB/s"
          + (f" ({by_size})" if by_size else "") + "; " + ", ".join(
        f"{k} {v:.0f} TFLOP/s" for k, v in result["tflops"].items())
        + f"; launch floor {result['launch_floor_ms'] * 1000:.2f} us per call"
        + (f" ({result['launch_floor_pdl_ms'] * 1000:.2f} with PDL)"
           if result.get("launch_floor_pdl_ms") else "")
        + (f"; a kernel reading one cold line {result['cold_read_floor_ms'] * 1000:.2f} us, "
           f"after an index read {result['dependent_read_floor_ms'] * 1000:.2f} us"
           if result.get("cold_read_floor_ms") else "")
        + f" -> {result['path']}",
        file=human_stream({"--out": args.out}))
    return EXIT_PASS


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _usage_error(message: str) -> int:
    print(f"atrex: error: {message}", file=sys.stderr)
    return EXIT_USAGE
