"""`atrex bench`: the repository's candidates against PyTorch baselines, interleaved on one GPU.

Baselines are the op's own reference: `eager` runs it as written, `compile` through torch.compile
(mode max-autotune-no-cudagraphs by default). `library` is the op directory's optional
`library.py`: what a serving team would otherwise call from the installed libraries (cuBLAS
through torch.mm / torch._scaled_mm, SDPA's cuDNN and flash backends, torch._grouped_mm,
F.rms_norm). Baselines are checked for correctness and timed, but not held to the own-kernel
rules. `kb` is the repository's kernel.py, judged like any candidate. All of an op's contestants
share one judge, so their timings interleave A B C A B C on the same GPU.

A library peer is never skipped silently: an op without library.py, or whose library.py raises
`LibraryUnavailable` (a class it defines) because this machine's torch lacks the call, is
`absent` in the bench document with the reason.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from . import scoring
from .evaluate import EvalOptions, evaluate
from .model import FindingKind, OpResult, Report
from .repo import OpSpec, RepoSpec
from .sandbox import CandidateRef

BASELINES = ("eager", "compile", "library", "kb")
LIBRARY_FILE = "library.py"
ABSENT = "absent"  # a library peer that is not there (no library.py, or unavailable here)
BENCH_SCHEMA = "1.5"  # 1.1: timing_calls_per_sample per shape; 1.2: the library contestant and
# `absent`, kb against each peer, errors with the native reference's own, spread and note, the
# launch floor; 1.3: `complete` and `not_evaluated` (the document is rewritten after every op);
# 1.4: `sessions` (the parts of a resumed run), per shape `implementation` (a baseline's own
# account of what it ran); 1.5: `compile_cache` (Inductor's cache directory, or null)

_HEADER = '''"""Baseline for atrex bench: the reference implementation, {how}."""
import importlib.util

import torch

_spec = importlib.util.spec_from_file_location("atrex_bench_reference", {path!r})
_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_reference)
'''

_BODIES = {
    "eager": ("run eagerly", '''

class Model(_reference.Model):
    pass
'''),
    "compile": ("run through torch.compile", '''{cache}
class Model(_reference.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._compiled = torch.compile(super().forward, mode={mode!r}, dynamic=False)

    def forward(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)
'''),
}


def _cache_lines(cache: Path | None) -> str:
    """Inductor's cache for the compile baseline. Each executor has a scratch directory of its
    own as TMPDIR, so by default every run compiles and autotunes afresh, and max-autotune's
    choices (and times) vary from run to run: fused_add_rmsnorm decode read 2.7 us in one H200
    bench and 11.2 us in another (2026-12-04). A shared directory keeps the first choice."""
    if cache is None:
        return "\n"
    return (f"\n# Inductor's cache, shared by the runs that name it (atrex bench --compile-cache)\n"
            f"import os\n\nos.environ['TORCHINDUCTOR_CACHE_DIR'] = {str(cache)!r}\n\n")


def baseline_refs(repo: RepoSpec, op: OpSpec, baselines: list[str], workdir: Path,
                  compile_mode: str, compile_cache: Path | None = None) -> list[CandidateRef]:
    refs = []
    reference = str(op.path / "reference.py")
    for name in baselines:
        if name == "kb":
            refs.append(CandidateRef("kb", op.path / op.kernel_file, repo.root))
            continue
        if name == "library":
            if (op.path / LIBRARY_FILE).is_file():
                refs.append(CandidateRef("library", op.path / LIBRARY_FILE, repo.root,
                                         role="baseline"))
            continue
        how, body = _BODIES[name]
        target = workdir / op.name / name
        target.mkdir(parents=True, exist_ok=True)
        source = _HEADER.format(how=how, path=reference) + body.format(
            mode=compile_mode, cache=_cache_lines(compile_cache))
        (target / "kernel.py").write_text(source)
        refs.append(CandidateRef(name, target / "kernel.py", target, role="baseline",
                                 writable=(compile_cache,) if compile_cache else ()))
    return refs


def run_bench(repo: RepoSpec, baselines: list[str], options: EvalOptions,
              compile_mode: str = "max-autotune-no-cudagraphs",
              progress=None, on_partial=None,
              compile_cache: Path | None = None) -> dict[str, Report]:
    """One report per contestant label (eager, compile, kb). `on_partial` gets the reports so far
    after every operator, so a run cut short (a device lease ending) keeps what finished."""
    if compile_cache is not None:
        compile_cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="atrex-bench-") as tmp:
        plan = {op.name: baseline_refs(repo, op, baselines, Path(tmp), compile_mode,
                                       compile_cache)
                for op in repo.ops}
        return evaluate(repo, plan, options, progress, on_partial)


def bench_document(repo: RepoSpec, reports: dict[str, Report], baselines: list[str],
                   compile_mode: str, complete: bool = True,
                   parts: list[dict] | None = None, compile_cache: Path | None = None) -> dict:
    """The bench document; a partial one (`complete` false) names the operators still to run.
    `parts`: when each part of a resumed run started and what it ran (runner/benchresume.py)."""
    first = next(reports[b] for b in baselines if b in reports)
    instances = [_instance(repo.op(op.name), {b: _op_of(reports, b, op.name) for b in baselines})
                 for op in first.ops]
    done = {op.name for op in first.ops}
    return {
        "schema_version": BENCH_SCHEMA, "kind": "atrex-bench", "complete": complete,
        "not_evaluated": [] if complete else [op.name for op in repo.ops if op.name not in done],
        "device": first.to_dict()["device"], "timing_available": first.timing_available,
        "baselines": baselines, "compile_mode": compile_mode,
        "compile_cache": None if compile_cache is None else str(compile_cache),
        "repo": str(repo.root),
        "created_at": first.created_at, "instances": instances,
        "weighted": {b: _weighted(reports[b]) if b in reports else _no_weighted()
                     for b in baselines},
        "notes": first.notes, "sessions": parts or [],
    }


def _op_of(reports: dict[str, Report], label: str, name: str) -> OpResult | None:
    try:
        return reports[label].op(name)
    except KeyError:
        return None


def _instance(op: OpSpec, results: dict[str, OpResult | None]) -> dict:
    present = {label: r for label, r in results.items() if r is not None}
    any_result = next(iter(present.values()))
    bounds = {s.bound for s in any_result.shapes}
    entry = {"op": op.name, "weight": op.importance, "importance": any_result.importance,
             "bound": bounds.pop() if len(bounds) == 1 else "mixed", "results": {}}
    for label, result in results.items():
        if result is None:
            entry["results"][label] = _absent(any_result, f"no {LIBRARY_FILE} in {op.path.name}/"
                                              if label == "library" else "not run")
            continue
        unavailable = _unavailable(result)
        entry["results"][label] = {
            "status": ABSENT if unavailable.get("*") else result.status.value,
            "score": result.score,
            "score_measured": result.score_measured, "own_kernel_share": result.own_kernel_share,
            "absent_reason": unavailable.get("*"), "load_wall_s": result.load_wall_s,
            "shapes": {s.id: _shape_entry(s, unavailable) for s in result.shapes}}
    entry["kb_vs_best_baseline"] = _speedups(present)
    entry["kb_vs"] = _speedups_per_peer(present)
    return entry


def _shape_entry(s, unavailable: dict[str, str]) -> dict:
    reason = unavailable.get(s.id) or unavailable.get("*")
    entry = {"status": ABSENT if reason else s.status.value, "time_ms": s.time_ms,
             "sol_ms": s.sol_ms, "roofline_fraction": s.roofline_fraction,
             "roofline_fraction_measured": s.roofline_fraction_measured,
             "launch_floor_ms": s.launch_floor_ms,
             "launch_floor_fraction": s.launch_floor_fraction,
             "timing_method": s.timing_method,
             "timing_calls_per_sample": s.timing_calls_per_sample,
             "timing_spread": s.timing_spread, "timing_note": s.timing_note,
             "timing_new_values_ms": s.timing_new_values_ms,
             "timing_sm_clock_mhz": s.timing_sm_clock_mhz,
             "timing_sm_clock_range_mhz": s.timing_sm_clock_range_mhz,
             "timing_slowdowns": s.timing_slowdowns,
             "timing_power_max_w": s.timing_power_max_w,
             "timing_temperature_max_c": s.timing_temperature_max_c,
             "max_abs_error": s.max_abs_error, "rel_l2_error": s.rel_l2_error,
             "reference_max_abs_error": s.reference_max_abs_error,
             "reference_rel_l2_error": s.reference_rel_l2_error,
             "weight": s.weight, "message": s.message, "implementation": s.implementation,
             "check_wall_s": s.check_wall_s, "shape_wall_s": s.shape_wall_s}
    if reason:
        entry["absent_reason"] = reason
    return entry


def _unavailable(result: OpResult) -> dict[str, str]:
    """Shape id (and "*" when it is every shape) -> why the library peer is not available here.
    Findings are deduplicated per op, so a shape is matched by its finding or its message."""
    reasons = [f for f in result.findings if f.kind is FindingKind.UNAVAILABLE]
    found = {}
    for shape in result.shapes:
        for finding in reasons:
            if finding.shape_id == shape.id or shape.message == finding.message:
                found[shape.id] = finding.message
                break
    if found and len(found) == len(result.shapes):
        found["*"] = next(iter(found.values()))
    return found


def _absent(like: OpResult, reason: str) -> dict:
    return {"status": ABSENT, "score": None, "score_measured": None, "own_kernel_share": None,
            "absent_reason": reason,
            "shapes": {s.id: {"status": ABSENT, "absent_reason": reason, "time_ms": None}
                       for s in like.shapes}}


def _speedups(results: dict[str, OpResult]) -> dict[str, float | None]:
    """Per shape: best baseline time over the kb time (>= 1 means kb is at least as fast)."""
    if "kb" not in results:
        return {}
    speedups = {}
    for shape in results["kb"].shapes:
        base_times = [s.time_ms for label, r in results.items() if label != "kb"
                      for s in r.shapes if s.id == shape.id and s.time_ms]
        speedups[shape.id] = (min(base_times) / shape.time_ms
                              if base_times and shape.time_ms else None)
    return speedups


def _speedups_per_peer(results: dict[str, OpResult]) -> dict[str, dict[str, float | None]]:
    """Per shape and peer: the peer's time over kb's, so every "ahead of" names whom it beat."""
    if "kb" not in results:
        return {}
    table: dict[str, dict[str, float | None]] = {}
    for shape in results["kb"].shapes:
        row = {}
        for label, result in results.items():
            if label == "kb":
                continue
            theirs = next((s.time_ms for s in result.shapes if s.id == shape.id), None)
            row[label] = theirs / shape.time_ms if theirs and shape.time_ms else None
        table[shape.id] = row
    return table


def _weighted(report: Report) -> dict[str, float | None]:
    memory_ops = [op for op in report.ops if op.shapes and all(
        s.bound == "memory" for s in op.shapes)]
    return {"all": scoring.repo_score(report.ops),
            "all_measured": scoring.repo_score(report.ops, "score_measured"),
            "memory_bound": _renormalized(memory_ops),
            "memory_bound_ops": [op.name for op in memory_ops],
            "ops": [op.name for op in report.ops]}


def _no_weighted() -> dict:
    return {"all": None, "all_measured": None, "memory_bound": None, "memory_bound_ops": [],
            "ops": []}


def _renormalized(ops: list[OpResult]) -> float | None:
    total = sum(op.importance or 0.0 for op in ops)
    if not ops or total <= 0 or any(op.score is None for op in ops):
        return None
    return sum((op.importance or 0.0) * op.score for op in ops) / total


def bench_markdown(doc: dict) -> str:
    """Conventions of runner/render.py: `n/a (<why>)` for a missing value, weights in percent."""
    baselines = doc["baselines"]
    timed = doc["timing_available"]
    header = "| Instance | Weight (% of GPU time) | Shape | " + " | ".join(
        f"{b} fraction (time)" for b in baselines) + " |"
    lines = [f"## atrex bench: {doc['device']['name']}", "",
             f"torch {doc['device']['torch']}, triton {doc['device']['triton']}"
             + (f", driver {doc['device']['driver']}" if doc['device'].get('driver') else "")
             + (f", card {doc['device']['uuid']}" if doc['device'].get('uuid') else "")
             + ("; roofline against datasheet peaks" if timed else "; no GPU timing")
             + f"; compile mode `{doc['compile_mode']}`"
             + ("; CUDA-graph timings marked (g×N: one replay of N calls, time per call), "
                "with the time against max(SOL, the measured launch floor) where calibrated."
                if timed else ".")
             + _floors_sentence(doc["device"]), "", header,
             "|" + "---|" * (3 + len(baselines))]
    for inst in doc["instances"]:
        shape_ids = list(inst["results"][baselines[0]]["shapes"])
        for index, sid in enumerate(shape_ids):
            cells = [_cell(inst["results"][b]["shapes"].get(sid, {})) for b in baselines]
            name = f"`{inst['op']}`" if index == 0 else ""
            weight = _percent(inst.get("importance")) if index == 0 else ""
            lines.append(f"| {name} | {weight} | `{sid}` | " + " | ".join(cells) + " |")
    total = len(doc["instances"])
    for key, label in (("all", "all instances"), ("memory_bound", "memory-bound instances")):
        cells = [_weighted_cell(doc["weighted"][b], key, timed, total) for b in baselines]
        lines.append(f"| **GPU-hour-weighted, {label}** | | | " + " | ".join(cells) + " |")
    return "\n".join(lines + _draw_dependent(doc) + _clocks(doc) + _wall_time(doc)
                     + _implementations(doc) + _parts(doc)) + "\n"


def _clocks(doc: dict) -> list[str]:
    """The SM clock the shapes were timed at (a shape's contestants share its timed window),
    and the shapes during which nvidia-smi said the clock was held down."""
    shapes: dict[tuple[str, str], dict] = {}
    for inst in doc["instances"]:
        for result in inst["results"].values():
            for sid, shape in result["shapes"].items():
                if shape.get("timing_sm_clock_mhz") is not None:
                    shapes.setdefault((inst["op"], sid), shape)
    if not shapes:
        return []
    medians = [shape["timing_sm_clock_mhz"] for shape in shapes.values()]
    lines = ["", f"SM clock while the shapes were timed (nvidia-smi beside the repetitions, "
             f"each shape's median): {min(medians):.0f}-{max(medians):.0f} MHz over "
             f"{len(shapes)} shapes."]
    held = [f"- `{op}` `{sid}`: {', '.join(shape['timing_slowdowns'])} (SM "
            f"{shape['timing_sm_clock_mhz']:.0f} MHz)"
            for (op, sid), shape in shapes.items() if shape.get("timing_slowdowns")]
    if held:
        lines += ["", "The driver held the clock down while these were timed (compare their "
                  "times with care):", ""] + held
    return lines


def _draw_dependent(doc: dict) -> list[str]:
    """The times that hold for the judge's draw only: calls on new values took very different."""
    rows = [f"- `{inst['op']}` {label} `{sid}`: {_us(shape['time_ms'])} a call on the timed "
            f"draw, {_us(shape['timing_new_values_ms'])} on new values"
            for inst in doc["instances"] for label, result in inst["results"].items()
            for sid, shape in result["shapes"].items()
            if scoring.draw_dependent(shape.get("time_ms"), shape.get("timing_new_values_ms"))]
    if not rows:
        return []
    return ["", "Times that depend on the input values (they hold for the judge's draw only):",
            ""] + rows


def _us(ms: float) -> str:
    return f"{ms * 1000:.1f} µs"


def _wall_time(doc: dict) -> list[str]:
    """Where the judge's wall time went: the shapes in all, and each contestant's executor
    start-up and correctness checks (a compiled baseline's compilation is in its checks)."""
    shapes: dict[tuple[str, str], float] = {}
    own: dict[str, float] = {}
    for inst in doc["instances"]:
        for label, result in inst["results"].items():
            own[label] = own.get(label, 0.0) + (result.get("load_wall_s") or 0.0)
            for sid, shape in result["shapes"].items():
                own[label] += shape.get("check_wall_s") or 0.0
                if shape.get("shape_wall_s") is not None:
                    shapes[(inst["op"], sid)] = shape["shape_wall_s"]
    if not shapes:
        return []
    each = ", ".join(f"{label} {seconds:.0f} s" for label, seconds in own.items())
    return ["", f"Judge wall time: {sum(shapes.values()):.0f} s over {len(shapes)} shapes; "
            f"executor start-up and correctness checks by contestant: {each}."]


def _implementations(doc: dict) -> list[str]:
    """What each baseline said it ran, once per operator and baseline where its shapes agree."""
    said: dict[tuple[str, str, str], list[str]] = {}
    for inst in doc["instances"]:
        for label in doc["baselines"]:
            for sid, shape in inst["results"][label]["shapes"].items():
                if shape.get("implementation"):
                    said.setdefault((inst["op"], label, shape["implementation"]), []).append(sid)
    if not said:
        return []
    return ["", "What the baselines say they ran:", ""] + [
        f"- `{op}` {label} ({', '.join(f'`{s}`' for s in sids)}): {text}"
        for (op, label, text), sids in said.items()]


def _parts(doc: dict) -> list[str]:
    parts = doc.get("sessions") or []
    if len(parts) < 2:
        return []
    cards = list(dict.fromkeys(p["gpu_uuid"] for p in parts if p.get("gpu_uuid")))
    lines = ["", f"One run in {len(parts)} parts (`atrex bench --resume`), the same GPU model, "
             "driver and software:", ""] + [
        f"- started {p.get('started_at')}: {', '.join(p.get('ops') or []) or 'nothing left'}"
        + (f" (card {p['gpu_uuid']})" if len(cards) > 1 and p.get("gpu_uuid") else "")
        for p in parts]
    if len(cards) > 1:
        lines += ["", f"The parts ran on {len(cards)} different cards of that model: cards of "
                  "one model can differ by a few percent, so compare times measured in "
                  "different parts with that in mind."]
    return lines


def _floors_sentence(device: dict) -> str:
    """The calibrated floors a launch-bound row is read against, or nothing uncalibrated."""
    if not device.get("launch_floor_ms"):
        return ""
    text = f" Launch floor: {device['launch_floor_ms'] * 1000:.2f} µs per call"
    if device.get("cold_read_floor_ms") and device.get("dependent_read_floor_ms"):
        text += (f"; a kernel reading one cold line {device['cold_read_floor_ms'] * 1000:.2f} µs,"
                 f" after an index read {device['dependent_read_floor_ms'] * 1000:.2f} µs")
    return text + "."


def _cell(shape: dict) -> str:
    if not shape:
        return "n/a (not run)"
    if shape.get("status") == ABSENT:
        return f"absent ({_short(shape.get('absent_reason') or 'not available')})"
    if shape.get("status") != "pass":
        return f"n/a ({shape.get('status', 'no result')})"
    time_ms = shape.get("time_ms")
    if time_ms is None:
        return "n/a (no GPU)"
    calls = shape.get("timing_calls_per_sample") or 1
    mark = f" (g×{calls})" if shape.get("timing_method") == "cuda_graph" else ""
    floor = shape.get("launch_floor_fraction")
    launch = f"; {floor:.2f} of launch floor" if floor is not None else ""
    return f"{_fmt(shape.get('roofline_fraction'))} ({_us(time_ms)}{mark}{launch})"


def _short(reason: str, limit: int = 60) -> str:
    reason = " ".join(reason.replace("|", "/").split())
    for prefix in ("LibraryUnavailable: ",):
        reason = reason.removeprefix(prefix)
    return reason if len(reason) <= limit else reason[:limit - 1] + "…"


def _weighted_cell(weighted: dict, key: str, timed: bool, total: int) -> str:
    value = weighted[key]
    covered = len(weighted.get("ops", []))
    if value is not None:
        return _fmt(value) + (f" (over {covered} of {total} instances)"
                              if key == "all" and 0 < covered < total else "")
    if not weighted.get("ops"):
        return "n/a (absent)"
    if not timed:
        return "n/a (no GPU)"
    return "n/a (no such instance)" if key == "memory_bound" and not weighted.get(
        "memory_bound_ops") else "n/a (not timed)"


def _percent(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0%}" if value >= 0.01 or value == 0 else f"{value:.2%}"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
