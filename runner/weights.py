"""`atrex weights TRACE --map atrex.toml`: operator and shape weights from a profiler trace.

The map (`[weights.map]` in atrex.toml) names, per operator of the repository, the trace names
that are that operator: glob patterns matched against host op names (`aten::rms_norm`), profiler
annotations (`record_function`), module names (`nn.Module: LlamaRMSNorm_0`) and kernel names.

Time units: on a trace with GPU activity, every kernel (and memcpy/memset) with its duration; on a
CPU-only trace, every host op's self time. A unit belongs to the outermost event of its launch
chain (annotations and ops enclosing the launching op, then the kernel itself) whose name an
operator's pattern matches, so a fused operator's annotation takes all of its kernels. That event
is one call of the operator; its input dims pick the shape (every input tensor of the shape must
appear among the call's tensor arguments, dims and dtype equal; size-1 axes are ignored where
the exact dims do not match). A unit no pattern matches is time the repository does not cover.

Written into each operator's metadata.json: `importance_score` (its share of the trace's time)
and, per shape, `call_count` and `total_duration_us`. The diff is shown first; `--write` writes.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .config import CONFIG_NAME, load_config
from .errors import FormatError
from .trace import HostEvent, Trace, read_trace

EXIT_OK, EXIT_USAGE = 0, 2
TOP_UNMATCHED = 10

Tensors = list[tuple[tuple[int, ...], str | None]]


@dataclass
class ShapeTally:
    calls: int = 0
    time_us: float = 0.0


@dataclass
class OpTally:
    calls: int = 0
    time_us: float = 0.0
    shapes: dict[str, ShapeTally] = field(default_factory=dict)
    no_shape_calls: int = 0  # calls whose input dims matched none of the op's shapes
    no_shape_dims: Counter = field(default_factory=Counter)  # those dims, for the report


@dataclass
class Attribution:
    source: str  # "gpu_kernels" or "cpu_ops"
    total_us: float
    ops: dict[str, OpTally]
    unmatched: Counter  # trace name -> microseconds no operator covers
    ambiguous_us: float = 0.0  # matched several operators by name and none by shape

    @property
    def matched_us(self) -> float:
        return sum(t.time_us for t in self.ops.values())

    @property
    def uncovered_share(self) -> float:
        return 1.0 - self.matched_us / self.total_us if self.total_us > 0 else 0.0

    def share(self, op: str) -> float:
        return self.ops[op].time_us / self.total_us if self.total_us > 0 else 0.0


# --- the map --------------------------------------------------------------------------------------

def load_map(path: Path, op_names: list[str],
             broken: dict[str, str] | None = None) -> dict[str, list[str]]:
    """`[weights.map]`: operator name -> list of glob patterns, validated against the repo."""
    config = load_config(path.parent) if path.name == CONFIG_NAME else None
    table = config.weights if config is not None else _read_toml(path).get("weights", {})
    mapping = table.get("map") if isinstance(table, dict) else None
    if not isinstance(mapping, dict) or not mapping:
        raise FormatError(path, "weights.map", "missing: a table of operator = [trace name "
                          "patterns], e.g. rmsnorm = [\"aten::rms_norm\", \"*rms_norm_kernel*\"]")
    for key in table:
        if key != "map":
            raise FormatError(path, f"weights.{key}", "unknown key (expected map)")
    for op, patterns in mapping.items():
        if op in (broken or {}):
            raise FormatError(path, f"weights.map.{op}", f"operator {op} is malformed: "
                              f"{broken[op]}")
        if op not in op_names:
            raise FormatError(path, f"weights.map.{op}", "no such operator in the repository "
                              f"(operators: {', '.join(sorted(op_names))})")
        if isinstance(patterns, str):
            patterns = [patterns]
        if not isinstance(patterns, list) or not patterns or not all(
                isinstance(p, str) and p for p in patterns):
            raise FormatError(path, f"weights.map.{op}", "must be a list of name patterns")
        mapping[op] = patterns
    return mapping


def _read_toml(path: Path) -> dict:
    import tomllib

    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FormatError(path, None, "no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(path, None, f"not valid TOML: {exc}") from None


# --- attribution ----------------------------------------------------------------------------------

def _ops_matching(name: str, mapping: dict[str, list[str]]) -> list[str]:
    return [op for op, patterns in mapping.items()
            if any(fnmatch.fnmatchcase(name, p) for p in patterns)]


def _squeezed(dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in dims if d != 1)


def shape_matches(shape: Tensors, call: Tensors, squeeze: bool) -> bool:
    """Every tensor of the shape appears among the call's tensor arguments (each used once)."""
    if not shape:
        return False
    left = list(call)
    for dims, dtype in shape:
        want = _squeezed(dims) if squeeze else dims
        for index, (got, got_dtype) in enumerate(left):
            same_dims = (_squeezed(got) if squeeze else got) == want
            if same_dims and (dtype is None or got_dtype is None or dtype == got_dtype):
                del left[index]
                break
        else:
            return False
    return True


def pick_shape(shapes: dict[str, Tensors], call: Tensors) -> str | None:
    """The shape this call ran: exact dims first, then dims without size-1 axes; among several
    matches, the one that accounts for the most tensors (ties: the first in shapes.json)."""
    for squeeze in (False, True):
        found = [sid for sid, tensors in shapes.items() if shape_matches(tensors, call, squeeze)]
        if found:
            return max(found, key=lambda sid: len(shapes[sid]))
    return None


@dataclass
class _Unit:
    """A piece of the trace's time: a kernel, or a host op's self time."""

    dur: float
    chain: list[HostEvent]  # host events enclosing it, outermost first
    kernel: str | None  # the kernel's name (GPU units)

    def names(self) -> list[str]:
        return [e.name for e in self.chain] + ([self.kernel] if self.kernel else [])

    @property
    def leaf(self) -> str:
        return self.kernel or self.chain[-1].name


def _units(trace: Trace) -> tuple[str, list[_Unit]]:
    if trace.has_device_time:
        return "gpu_kernels", [_Unit(k.dur, k.launcher.chain() if k.launcher else [], k.name)
                               for k in trace.device]
    return "cpu_ops", [_Unit(e.self_time(), e.chain(), None) for e in trace.host
                       if e.category == "cpu_op"]


def attribute(trace: Trace, mapping: dict[str, list[str]],
              shapes: dict[str, dict[str, Tensors]]) -> Attribution:
    source, units = _units(trace)
    result = Attribution(source, sum(u.dur for u in units), {op: OpTally() for op in mapping},
                         Counter())
    calls: dict[object, tuple[str | None, str | None]] = {}  # matched event -> (op, shape)
    for index, unit in enumerate(units):
        matched = _first_match(unit.names(), mapping)
        if matched is None:
            result.unmatched[unit.leaf] += unit.dur
            continue
        depth, candidates = matched
        # the matched host event is the call; a kernel matched by its own name is one call
        event = unit.chain[depth] if depth < len(unit.chain) else None
        key = event if event is not None else index
        if key not in calls:
            source_event = event or (unit.chain[-1] if unit.chain else None)
            tensors = source_event.tensor_args() if source_event is not None else []
            calls[key] = _resolve(candidates, tensors, shapes)
            if calls[key][0] is not None:
                _count_call(result.ops[calls[key][0]], calls[key][1], tensors)
        op, shape = calls[key]
        if op is None:
            result.ambiguous_us += unit.dur
            result.unmatched[f"(ambiguous: {' | '.join(candidates)})"] += unit.dur
            continue
        result.ops[op].time_us += unit.dur
        if shape is not None:
            result.ops[op].shapes[shape].time_us += unit.dur
    return result


def _first_match(names: list[str],
                 mapping: dict[str, list[str]]) -> tuple[int, list[str]] | None:
    for depth, name in enumerate(names):
        candidates = _ops_matching(name, mapping)
        if candidates:
            return depth, candidates
    return None


def _resolve(candidates: list[str], tensors: Tensors,
             shapes: dict[str, dict[str, Tensors]]) -> tuple[str | None, str | None]:
    by_shape = [(op, pick_shape(shapes.get(op, {}), tensors)) for op in candidates]
    found = [(op, sid) for op, sid in by_shape if sid is not None]
    if len(found) == 1 or (found and len(candidates) == 1):
        return found[0]
    if len(candidates) == 1:
        return candidates[0], None
    return None, None


def _count_call(tally: OpTally, shape: str | None, tensors: Tensors) -> None:
    tally.calls += 1
    if shape is None:
        tally.no_shape_calls += 1
        tally.no_shape_dims[str([list(d) for d, _ in tensors])] += 1
        return
    tally.shapes.setdefault(shape, ShapeTally()).calls += 1


# --- metadata -------------------------------------------------------------------------------------

def updated_metadata(current: dict, tally: OpTally, share: float,
                     shape_ids: list[str]) -> dict:
    """The op's metadata with the trace's weights: importance_score always; per-shape counts
    only where at least one call matched a shape (else the shapes keep what they had)."""
    data = dict(current)
    data["importance_score"] = round(share, 6)
    if not tally.shapes:
        return data
    shapes = dict(data.get("shapes") or {})
    for shape_id in shape_ids:
        seen = tally.shapes.get(shape_id, ShapeTally())
        entry = dict(shapes.get(shape_id) or {})
        entry["call_count"] = seen.calls
        entry["total_duration_us"] = round(seen.time_us, 3)
        shapes[shape_id] = entry
    data["shapes"] = shapes
    return data


def metadata_diff(path: Path, old_text: str, new_text: str) -> str:
    return "".join(difflib.unified_diff(old_text.splitlines(keepends=True),
                                        new_text.splitlines(keepends=True),
                                        fromfile=f"{path} (current)", tofile=f"{path} (trace)"))


def summary(attribution: Attribution, trace_path: str) -> dict:
    ops = {}
    for name, tally in attribution.ops.items():
        ops[name] = {
            "share": round(attribution.share(name), 6), "calls": tally.calls,
            "time_us": round(tally.time_us, 3), "calls_matching_no_shape": tally.no_shape_calls,
            "dims_matching_no_shape": dict(tally.no_shape_dims.most_common(5)),
            "shapes": {sid: {"calls": s.calls, "time_us": round(s.time_us, 3)}
                       for sid, s in tally.shapes.items()}}
    return {"trace": trace_path, "time_source": attribution.source,
            "total_us": round(attribution.total_us, 3),
            "matched_us": round(attribution.matched_us, 3),
            "uncovered_share": round(attribution.uncovered_share, 6), "ops": ops,
            "top_uncovered": [[name, round(us, 3)] for name, us in
                              attribution.unmatched.most_common(TOP_UNMATCHED)]}


# --- command --------------------------------------------------------------------------------------

def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "weights", help="operator and shape weights from a PyTorch profiler trace",
        description="Attribute a torch.profiler trace's GPU kernel time (CPU op time on a "
        "trace without GPU activity) to the repository's operators and shapes, and write "
        "call_count / total_duration_us per shape and importance_score per operator into each "
        "metadata.json. Shows the diff; writes only with --write.")
    parser.add_argument("trace", type=Path, help="Chrome-trace JSON from torch.profiler "
                        "(export_chrome_trace, record_shapes=True); .json or .json.gz")
    parser.add_argument("--map", type=Path, required=True, metavar="TOML",
                        help="the [weights.map] table: operator = [trace name patterns] "
                        "(usually the repository's atrex.toml)")
    parser.add_argument("--repo", type=Path, default=None, metavar="PATH",
                        help="the repository (default: the directory of --map when it is the "
                        "repository's atrex.toml; required otherwise)")
    parser.add_argument("--write", action="store_true", help="write the metadata.json files")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the attribution summary")
    parser.set_defaults(func=run_weights)


def run_weights(args: argparse.Namespace) -> int:
    from .repo import load_repo
    from .survey import survey_repo

    if args.repo is None and args.map.name != CONFIG_NAME:
        print(f"atrex: error: --repo: required when --map is not the repository's {CONFIG_NAME}",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        repo = load_repo(args.repo or args.map.resolve().parent, strict=False)
        mapping = load_map(args.map.resolve(), [op.name for op in repo.ops],
                           {p.name: str(p.error) for p in repo.problems})
        trace = read_trace(args.trace)
        survey = survey_repo(repo, list(mapping))
    except FormatError as exc:
        print(f"atrex: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    shapes = {op: {s.shape_id: s.tensors for s in entries}
              for op, entries in survey.shapes.items()}
    attribution = attribute(trace, mapping, shapes)
    _print_summary(attribution, survey)
    for op in repo.ops:
        if op.name in mapping:
            _show_or_write(op, attribution, args.write)
    if args.json:
        document = summary(attribution, str(args.trace))
        document["not_surveyed"] = survey.failures
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    if not args.write:
        print("(dry run: add --write to write these metadata.json changes)")
    return EXIT_OK


def _show_or_write(op, attribution: Attribution, write: bool) -> None:
    path = Path(op.dir) / "metadata.json"
    old_text = path.read_text() if path.is_file() else ""
    current = json.loads(old_text) if old_text.strip() else {}
    new = updated_metadata(current, attribution.ops[op.name], attribution.share(op.name),
                           [s.id for s in op.shapes])
    new_text = json.dumps(new, indent=2) + "\n"
    explicit = [sid for sid, meta in (new.get("shapes") or {}).items()
                if isinstance(meta, dict) and "weight" in meta]
    if explicit:
        print(f"warning: {path}: shapes {', '.join(explicit)} have an explicit `weight`, which "
              "takes precedence over call_count", file=sys.stderr)
    if new_text == old_text:
        return
    print(metadata_diff(path, old_text, new_text), end="")
    if write:
        path.write_text(new_text)
        print(f"wrote {path}")


def _print_summary(attribution: Attribution, survey) -> None:
    label = "GPU kernel time" if attribution.source == "gpu_kernels" else \
        "CPU op time (the trace has no GPU activity)"
    print(f"{label}: {attribution.total_us / 1e3:.3f} ms; covered by the repository's operators "
          f"{attribution.matched_us / 1e3:.3f} ms; not covered: "
          f"{attribution.uncovered_share:.1%}")
    for name, tally in sorted(attribution.ops.items(), key=lambda kv: -kv[1].time_us):
        shapes = ", ".join(f"{sid} x{s.calls}" for sid, s in tally.shapes.items()) or "none"
        print(f"  {name}: {attribution.share(name):.2%} of the time, {tally.calls} calls; "
              f"shapes: {shapes}")
        if tally.no_shape_calls:
            dims = "; ".join(d for d, _ in tally.no_shape_dims.most_common(3))
            print(f"    {tally.no_shape_calls} calls matched no shape (input dims: {dims})")
    for name, message in survey.failures.items():
        print(f"  {name}: shapes not surveyed: {message}", file=sys.stderr)
    if attribution.unmatched:
        print("  largest time not covered: " + "; ".join(
            f"{name} {us / 1e3:.3f} ms" for name, us in attribution.unmatched.most_common(5)))
