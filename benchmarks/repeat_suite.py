"""Repeatability of the hot-op suite: five fresh runs of every launch-bound and every large shape,
the spread of each shape's time per call: (max - min) / median over the runs (issue 12: within
2%, or the report says the spread).

    python3 benchmarks/repeat_suite.py OUT.json [--runs 5] [--device cuda] [--max-seconds S]
        [--shapes op/shape,...] [--contestants kb] [--suite benchmarks/suite]

Each run is a fresh process (`--one-run`) that evaluates the chosen shapes with fresh judges and
executors, exactly as `atrex check` / `atrex bench` would. OUT.json is rewritten after every run
and a second call resumes where the first stopped (a device command is limited to ten minutes);
`--max-seconds` stops before a run that would not fit. `complete` says whether every shape has
all its runs.

The shapes (from the suite's SOL table, benchmarks/suite/README.md, H200 datasheet peaks):
launch-bound = SOL under 5 us (timed as CUDA-graph replays), large = SOL of 100 us or more.
Each run also records what the runner itself measured (launch_bound, the graph's calls per
sample, its own block spread and note), so the selection can be checked against the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LAUNCH_BOUND = ("fused_add_rmsnorm/decode-t64", "silu_and_mul/decode-t64", "rope/decode-t64",
                "kv_cache_append/decode-t64")
LARGE = ("gemm_prefill/gate-up-m8192-n28672-k4096", "fused_moe/prefill-t8192",
         "fp8_fused_moe/decode-t512", "silu_and_mul/prefill-t8192",
         "prefill_attention_gqa/prefill-4x2048", "mla_paged_decode/decode-b64-kv8k")
SPREAD_TARGET = 0.02


def spread(values: list[float]) -> float | None:
    """(max - min) / median; None with fewer than two values."""
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle > 0 else None


def summarize(runs: list[dict], wanted: dict[str, str], labels: list[str],
              runs_wanted: int) -> list[dict]:
    """Per shape and contestant: the times of the runs so far and their spread."""
    rows = []
    for key, kind in wanted.items():
        for label in labels:
            seen = [run["shapes"].get(f"{label}:{key}") for run in runs]
            seen = [s for s in seen if s is not None]
            times = [s["time_ms"] for s in seen if s.get("time_ms") is not None]
            value = spread(times)
            rows.append({
                "shape": key, "class": kind, "contestant": label,
                "runs": len(seen), "timed_runs": len(times), "runs_wanted": runs_wanted,
                "times_ms": times, "median_ms": statistics.median(times) if times else None,
                "spread": value,
                "within_target": None if value is None else value <= SPREAD_TARGET,
                "statuses": [s["status"] for s in seen],
                "methods": [s.get("timing_method") for s in seen],
                "calls_per_sample": [s.get("timing_calls_per_sample") for s in seen],
                "launch_bound": [s.get("launch_bound") for s in seen],
                "in_run_spreads": [s.get("timing_spread") for s in seen],
                "notes": sorted({s["note"] for s in seen if s.get("note")}),
            })
    return rows


def one_run(suite: Path, shapes: list[str], contestants: list[str], device: str,
            out: Path) -> int:
    """One fresh evaluation of the chosen shapes; writes {device, shapes: {label:op/shape: ...}}."""
    from atrex.runner.bench import run_bench
    from atrex.runner.evaluate import EvalOptions, evaluate_repo
    from atrex.runner.repo import load_repo

    by_op: dict[str, set[str]] = {}
    for key in shapes:
        op, shape = key.split("/", 1)
        by_op.setdefault(op, set()).add(shape)
    repo = load_repo(suite, only_ops=sorted(by_op))
    repo.ops = [dataclasses.replace(op, shapes=[s for s in op.shapes if s.id in by_op[op.name]])
                for op in repo.ops]
    options = EvalOptions(device=device)
    if contestants == ["kb"]:
        reports = {"kb": evaluate_repo(repo, options, label="kb")}
    else:
        reports = run_bench(repo, contestants, options)
    result = {"device": None, "shapes": {}}
    for label, report in reports.items():
        result["device"] = report.to_dict()["device"]
        for op in report.ops:
            for s in op.shapes:
                result["shapes"][f"{label}:{op.name}/{s.id}"] = {
                    "status": s.status.value, "time_ms": s.time_ms,
                    "timing_method": s.timing_method,
                    "timing_calls_per_sample": s.timing_calls_per_sample,
                    "launch_bound": s.launch_bound, "sol_ms": s.sol_ms,
                    "timing_spread": s.timing_spread, "note": s.timing_note or s.message}
    out.write_text(json.dumps(result) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    suite = Path(args.suite)
    if args.one_run:
        return one_run(suite, args.shapes.split(","), args.contestants.split(","), args.device,
                       Path(args.out))
    wanted = _wanted(args.shapes)
    labels = args.contestants.split(",")
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.is_file() else _new_doc(args, wanted, labels)
    start = time.monotonic()
    while len(doc["runs"]) < args.runs:
        last = doc["runs"][-1]["wall_s"] if doc["runs"] else 0.0
        if args.max_seconds and time.monotonic() - start + last > args.max_seconds:
            print(f"stopping: another run ({last:.0f} s) would pass --max-seconds", flush=True)
            break
        _run(doc, suite, wanted, labels, args.device)
        doc["shapes"] = summarize(doc["runs"], wanted, labels, args.runs)
        doc["complete"] = len(doc["runs"]) >= args.runs
        out.write_text(json.dumps(doc, indent=2) + "\n")
    for row in doc["shapes"]:
        value = "n/a" if row["spread"] is None else f"{row['spread']:.2%}"
        print(f"{row['contestant']} {row['shape']} ({row['class']}): {row['timed_runs']}/"
              f"{row['runs_wanted']} timed runs, spread {value}", flush=True)
    return 0


def _run(doc: dict, suite: Path, wanted: dict[str, str], labels: list[str], device: str) -> None:
    begin = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="atrex-repeat-") as tmp:
        path = Path(tmp) / "run.json"
        proc = subprocess.run(
            [sys.executable, __file__, str(path), "--one-run", "--suite", str(suite),
             "--shapes", ",".join(wanted), "--contestants", ",".join(labels),
             "--device", device], cwd=ROOT, capture_output=True, text=True)
        result = json.loads(path.read_text()) if path.is_file() else {"shapes": {}}
    doc["device"] = doc.get("device") or result.get("device")
    doc["runs"].append({"index": len(doc["runs"]), "exit": proc.returncode,
                        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                        "wall_s": time.monotonic() - begin, "shapes": result["shapes"],
                        "stderr_tail": proc.stderr[-1500:] if proc.returncode else ""})
    print(f"run {len(doc['runs'])}: exit {proc.returncode}, "
          f"{doc['runs'][-1]['wall_s']:.0f} s", flush=True)


def _new_doc(args, wanted: dict[str, str], labels: list[str]) -> dict:
    return {"kind": "atrex-repeat", "suite": str(args.suite), "device_kind": args.device,
            "commit": os.environ.get("ATREX_COMMIT", "unknown"), "runs_wanted": args.runs,
            "spread_target": SPREAD_TARGET, "contestants": labels, "selection": wanted,
            "device": None, "runs": [], "shapes": [], "complete": False}


def _wanted(shapes: str | None) -> dict[str, str]:
    if shapes:
        return {key: "chosen" for key in shapes.split(",")}
    return {**{key: "launch_bound" for key in LAUNCH_BOUND}, **{key: "large" for key in LARGE}}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--suite", default=str(ROOT / "benchmarks" / "suite"))
    parser.add_argument("--shapes", default=None, help="op/shape,... (default: the selection)")
    parser.add_argument("--contestants", default="kb",
                        help="kb (atrex check), or a bench baseline list such as eager,kb")
    parser.add_argument("--max-seconds", type=float, default=0.0)
    parser.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    sys.exit(main())
