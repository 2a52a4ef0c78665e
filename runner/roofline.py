"""`atrex roofline PATH`: the roofline floor of every operator and shape, with where each number
came from, so a floor can be audited before a roofline fraction is trusted.

Per shape it prints W by class (tensor-core and CUDA-core work, with the operations it came
from and the rule that counted them), Q read and written per tensor (whole, the rows actually
touched, or the rows rewritten in place), T_SOL against the target GPU's datasheet peaks, and
which bound it is. Declared ``flops`` / ``bytes`` in metadata.json override the counts and are
shown as declared. The counting runs the repository's reference in a child process
(runner.work.audit); on a machine without a GPU, large floating tensors are shapes only.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from .errors import FormatError
from .model import WorkSource
from .work import classes

if TYPE_CHECKING:
    from .work.audit import ShapeCount

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


EPILOG = """\
exit status:
  0  every shape was counted
  1  a shape could not be counted (its error is printed in its place)
  2  usage error, or the repository is malformed (file, field and problem on stderr)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "roofline", help="audit the roofline floor: W by class, Q read/write, T_SOL, sources",
        description="Count the work of each operator's reference per shape and print the "
        "roofline floor with where every number came from (counted, touched rows, declared).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", default=".",
                        help="repository or operator directory (default: the current directory, "
                        "searched recursively for operator directories)")
    parser.add_argument("--op", action="append", dest="ops", metavar="NAME",
                        help="only this operator (repeatable; default: every operator)")
    parser.add_argument("--shape", action="append", dest="shapes", metavar="ID",
                        help="only the shape with this id (repeatable; default: every shape)")
    parser.add_argument("--targets", choices=("all", "cpu", "cuda"), default="all",
                        help="only the shapes meant for this device (default: all)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the reference runs to be counted (default: cuda when a GPU "
                        "is visible; on the CPU large floating tensors are shapes only)")
    parser.add_argument("--gpu", metavar="KEY", help="peak table (runner/peaks.py; default: "
                        "atrex.toml [repo] gpu)")
    parser.add_argument("--json", metavar="FILE",
                        help="write the floors as JSON (`-`: standard output, the text then "
                        "goes to standard error)")
    parser.add_argument("--brief", action="store_true", help="only the summary table")
    parser.add_argument("--timeout-s", type=float, default=900.0, metavar="S",
                        help="per operator (default 900)")
    parser.set_defaults(func=run)


@dataclass
class Floor:
    """One shape's floor and its provenance."""

    op: str
    shape: str
    flops: dict[str, float] = field(default_factory=dict)
    flops_source: WorkSource = WorkSource.COUNTED
    bytes_read: float | None = None
    bytes_written: float | None = None
    bytes: float = 0.0
    bytes_source: WorkSource = WorkSource.COUNTED
    compute_ms: dict[str, float] = field(default_factory=dict)  # per unit
    memory_ms: float = 0.0
    sol_ms: float = 0.0
    bound: str = "memory"
    count: ShapeCount | None = None
    error: str | None = None
    # what the counter found where metadata.json declares the number instead
    counted_flops: dict[str, float] | None = None
    counted_bytes: float | None = None


def floor_of(op, shape, count: ShapeCount, tflops: dict, bandwidth: float) -> Floor:
    """Counts, declared overrides and the floor they give."""
    floor = Floor(op.name, shape.id, count=count, error=count.error)
    if count.error is None:
        floor.flops = {k: v for k, v in count.flops.items() if v}
        floor.bytes_read = float(sum(r["nbytes"] for r in count.reads))
        floor.bytes_written = float(sum(w["nbytes"] for w in count.writes))
        floor.bytes = floor.bytes_read + floor.bytes_written
        partial = any(c["rule"] != "whole" for c in count.reads + count.writes)
        floor.bytes_source = WorkSource.TOUCHED if partial else WorkSource.COUNTED
    if shape.flops is not None:
        cls = count.tensor_class or op.flop_dtype_class or "bf16"
        floor.counted_flops = dict(floor.flops) if count.error is None else None
        floor.flops = {cls: float(shape.flops)} if shape.flops else {}
        floor.flops_source = WorkSource.DECLARED
    if shape.bytes is not None:
        floor.counted_bytes = floor.bytes if count.error is None else None
        floor.bytes, floor.bytes_read, floor.bytes_written = float(shape.bytes), None, None
        floor.bytes_source = WorkSource.DECLARED
    if floor.error is not None and (shape.flops is None or shape.bytes is None):
        return floor
    floor.error = None
    for cls, n in floor.flops.items():
        unit = classes.unit(cls)
        floor.compute_ms[unit] = floor.compute_ms.get(unit, 0.0) + n / classes.rate_tflops(
            tflops, cls) / 1e9
    floor.memory_ms = classes.memory_ms(floor.bytes, bandwidth)
    floor.sol_ms = classes.sol_ms(floor.flops, floor.bytes, tflops, bandwidth)
    floor.bound = classes.bound(floor.flops, floor.bytes, tflops, bandwidth)
    return floor


def run(args: argparse.Namespace) -> int:
    from .output import human_stream, write_text
    from .peaks import DATASHEET, datasheet_peaks
    from .repo import load_repo
    from .work.audit import CountJob, count_in_subprocess  # torch: not on the parser's path

    try:
        repo = load_repo(args.path, only_ops=args.ops, needs_kernel=False)  # the reference's work
    except FormatError as exc:
        return _usage(str(exc))
    gpu = args.gpu or repo.config.gpu
    peaks = datasheet_peaks(gpu)
    if peaks is None:
        return _usage(f"--gpu: no peak table {gpu!r} (choose from {', '.join(DATASHEET)})")
    mode = _mode(args.device)
    if mode is None:
        return _usage("--device cuda: no CUDA GPU is visible on this machine")
    text = human_stream({"--json": args.json})
    floors: list[Floor] = []
    for op in repo.ops:
        shapes = [s for s in op.shapes if (not args.shapes or s.id in args.shapes)
                  and (args.targets == "all" or args.targets in s.targets)]
        if not shapes:
            continue
        job = CountJob(op_dir=op.dir, mode=mode, flop_dtype_class=op.flop_dtype_class,
                       mutates=list(op.mutates),
                       shapes=[{"id": s.id, "init_kwargs": s.init_kwargs,
                                "input_kwargs": s.input_kwargs} for s in shapes])
        counts = count_in_subprocess(job, timeout_s=args.timeout_s)
        for shape in shapes:
            floor = floor_of(op, shape, counts[shape.id], peaks.tflops, peaks.bandwidth_tbps)
            floors.append(floor)
            if not args.brief:
                print(describe(floor, mode), file=text, flush=True)
    if args.shapes and not floors:
        return _usage(f"--shape: no shape named {', '.join(args.shapes)}")
    print(summary_table(floors, f"{DATASHEET[gpu][0]} datasheet", mode), file=text)
    if args.json:
        write_text(args.json, json.dumps({"gpu": gpu, "peaks": asdict(peaks), "count_mode": mode,
                                          "floors": [asdict(f) for f in floors]}, indent=2) + "\n")
    return EXIT_FAIL if any(f.error for f in floors) else EXIT_OK


def _mode(device: str) -> str | None:
    import torch

    if device == "cuda":
        return "cuda" if torch.cuda.is_available() else None
    if device == "cpu":
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _usage(message: str) -> int:
    print(f"atrex: error: {message}", file=sys.stderr)
    return EXIT_USAGE


# ---- rendering --------------------------------------------------------------------------------


def describe(floor: Floor, mode: str) -> str:
    lines = [f"{floor.op} / {floor.shape}"]
    if floor.error:
        lines.append(f"  not counted: {floor.error}")
        return "\n".join(lines) + "\n"
    lines.append(f"  T_SOL {_ms(floor.sol_ms)} ({floor.bound}-bound): " + ", ".join(
        f"{unit} {_ms(ms)}" for unit, ms in floor.compute_ms.items()) + (
        ", " if floor.compute_ms else "") + f"memory {_ms(floor.memory_ms)}")
    lines.append(f"  W ({floor.flops_source})")
    if floor.counted_flops is not None:
        lines.append("    (counted: " + (", ".join(f"{c} {_si(n, 'FLOP')}" for c, n in sorted(
            floor.counted_flops.items())) or "none") + ")")
    if not floor.flops:
        lines.append("    none")
    for cls, n in sorted(floor.flops.items(), key=lambda kv: -kv[1]):
        lines.append(f"    {cls:<12} {_si(n, 'FLOP'):>12}  on {classes.unit(cls)}")
        if floor.flops_source == "counted" and floor.count is not None:
            for op in floor.count.ops:
                if op["cls"] == cls:
                    lines.append(f"      {op['op']} x{op['calls']}: {_si(op['flops'], 'FLOP')} "
                                 f"({op['rule']})")
    if floor.bytes_source == "declared":
        lines.append(f"  Q (declared) {_si(floor.bytes, 'B')}" + (
            f" (counted: {_si(floor.counted_bytes, 'B')})" if floor.counted_bytes is not None
            else ""))
    else:
        lines.append(f"  Q read {_si(floor.bytes_read, 'B')}, written "
                     f"{_si(floor.bytes_written, 'B')} ({floor.bytes_source})")
    if floor.count is not None and floor.count.error is None:
        for label, entries in (("read", floor.count.reads), ("written", floor.count.writes)):
            for c in entries:
                share = "" if c["rule"] == "whole" else (
                    f" = {c['elements']:,} of {c['total']:,} elements")
                lines.append(f"    {label:<7} {c['name']:<24} {_si(c['nbytes'], 'B'):>10}  "
                             f"{_rule(c['rule'])}{share}")
    if floor.count is not None and floor.count.conservative_ops:
        lines.append("  whole tensors assumed through: " + ", ".join(
            floor.count.conservative_ops))
    return "\n".join(lines) + "\n"


_RULES = {"whole": "whole tensor", "touched": "rows touched (index rule)",
          "rewritten": "rows rewritten in place", "unread": "not read"}


def _rule(rule: str) -> str:
    return _RULES.get(rule, rule)


def summary_table(floors: list[Floor], peaks_label: str, mode: str) -> str:
    header = ("op", "shape", "W tensor", "W CUDA", "Q read", "Q write", "T_SOL", "bound",
              "source W/Q")
    rows = []
    for f in floors:
        if f.error:
            rows.append((f.op, f.shape, "-", "-", "-", "-", "-", "error", f.error[:40]))
            continue
        tensor = sum(n for c, n in f.flops.items() if classes.unit(c) == classes.TENSOR_CORE)
        cuda = sum(n for c, n in f.flops.items() if classes.unit(c) == classes.CUDA_CORE)
        rows.append((f.op, f.shape, _si(tensor, "FLOP") if tensor else "-",
                     _si(cuda, "FLOP") if cuda else "-",
                     _si(f.bytes_read, "B") if f.bytes_read is not None else "-",
                     _si(f.bytes_written, "B") if f.bytes_written is not None else
                     _si(f.bytes, "B") + "*", _ms(f.sol_ms), f.bound,
                     f"{f.flops_source}/{f.bytes_source}"))
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    text = [f"roofline floors against the {peaks_label} (counted on {mode})",
            "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    text += ["  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    if any(f.bytes_source == "declared" for f in floors):
        text.append("* declared bytes (read and written together)")
    return "\n".join(text)


def _si(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _ms(value: float) -> str:
    return f"{value * 1e3:.4g} us" if value < 1 else f"{value:.4g} ms"
