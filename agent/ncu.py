"""Nsight Compute on one shape of a candidate: a small driver runs the candidate (warm-up outside
the profiled range), ``ncu --clock-control none`` collects a few metrics of every kernel in the
range, and the longest kernel the candidate defines is summarized.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from atrex.runner.astscan import parse_source
from atrex.runner.sandbox import scrubbed_env

from .measure import CandidateFile

CORE_METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__grid_size": "grid_size",
    "launch__block_size": "block_size",
    "launch__registers_per_thread": "registers",
}
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "wait", "barrier", "mio_throttle",
                 "lg_throttle", "math_pipe_throttle", "not_selected", "no_instruction",
                 "branch_resolving", "dispatch_stall", "membar", "drain", "imc_miss",
                 "tex_throttle", "sleeping", "misc")
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
MINIMAL_METRICS = ("gpu__time_duration.sum", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
                   "sm__throughput.avg.pct_of_peak_sustained_elapsed")
DRIVER = Path(__file__).resolve().parent / "ncu_driver.py"


class NcuError(Exception):
    pass


@dataclass
class NcuResult:
    kernel: str
    metrics: dict[str, float]
    stalls: list[tuple[str, float]]


def ncu_binary() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def own_kernel_names(source: str) -> set[str]:
    """Names of the module's ``@triton.jit`` functions (what ncu reports as kernel names)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d)
                                                     for d in node.decorator_list):
            names.add(node.name)
    return names


def profile_kernel(candidate: CandidateFile, op, shape_id: str, device_index: int = 0,
                   timeout_s: float = 180.0) -> NcuResult:
    binary = ncu_binary()
    if binary is None:
        raise NcuError("ncu is not installed")
    shape = op.shape(shape_id)
    with tempfile.TemporaryDirectory(prefix="atrex-ncu-") as scratch:
        job = Path(scratch) / "job.json"
        job.write_text(json.dumps({"op_dir": str(op.path), "kernel": str(candidate.kernel),
                                   "root": str(candidate.root), "init_kwargs": shape.init_kwargs,
                                   "input_kwargs": shape.input_kwargs}))
        text = _run_first_working(binary, job, scratch, device_index, timeout_s)
    rows = parse_csv(text)
    return summarize(rows, own_kernel_names(candidate.source))


def _run_first_working(binary: str, job: Path, scratch: str, device_index: int,
                       timeout_s: float) -> str:
    """An unknown metric name fails a whole ncu run: fall back to smaller metric sets."""
    stall_metrics = [STALL_METRIC.format(r) for r in STALL_REASONS]
    sets = [list(CORE_METRICS) + stall_metrics, list(CORE_METRICS), list(MINIMAL_METRICS)]
    for index, metrics in enumerate(sets):
        try:
            return _run(binary, metrics, job, scratch, device_index, timeout_s)
        except NcuError as exc:
            if index == len(sets) - 1 or "metric" not in str(exc).lower():
                raise
    raise AssertionError("unreachable")


def _run(binary: str, metrics: list[str], job: Path, scratch: str, device_index: int,
         timeout_s: float) -> str:
    command = [binary, "--clock-control", "none", "--profile-from-start", "off",
               "--target-processes", "all", "--csv", "--page", "raw",
               "--metrics", ",".join(metrics), sys.executable, "-s", str(DRIVER), str(job)]
    env = scrubbed_env("cuda", device_index, Path(scratch))
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              env=env, cwd=scratch)
    except subprocess.TimeoutExpired:
        raise NcuError(f"ncu took longer than {timeout_s:g} s") from None
    except OSError as exc:
        raise NcuError(f"ncu could not start: {exc}") from None
    errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "==ERROR==" in line]
    if proc.returncode != 0 or errors:
        detail = errors[0] if errors else (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise NcuError(f"ncu failed (exit {proc.returncode}): {detail[:300]}")
    return proc.stdout


def parse_csv(text: str) -> list[dict[str, str]]:
    """Rows of ``ncu --csv --page raw``: a header, a units row, one row per profiled kernel."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    if not lines:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(lines)))
    return [row for row in reader if (row.get("ID") or "").strip().isdigit()]


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def summarize(rows: list[dict[str, str]], own_names: set[str]) -> NcuResult:
    if not rows:
        raise NcuError("ncu profiled no kernel (nothing ran between profiler start and stop)")
    own = [r for r in rows if _base_name(r.get("Kernel Name", "")) in own_names] or rows
    longest = max(own, key=lambda r: _number(r.get("gpu__time_duration.sum")) or 0.0)
    metrics = {}
    for metric, key in CORE_METRICS.items():
        value = _number(longest.get(metric))
        if value is not None:
            metrics[key] = value
    if "duration_ns" in metrics:
        metrics["duration_us"] = metrics.pop("duration_ns") / 1000.0
    stalls = []
    for reason in STALL_REASONS:
        value = _number(longest.get(STALL_METRIC.format(reason)))
        if value is not None:
            stalls.append((reason, value))
    stalls.sort(key=lambda item: -item[1])
    return NcuResult(kernel=_base_name(longest.get("Kernel Name", "?")), metrics=metrics,
                     stalls=stalls)


def _base_name(name: str) -> str:
    return name.split("(")[0].strip()
