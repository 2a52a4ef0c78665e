"""One line per profiled kernel launch from Nsight Compute's `--csv --page details` output: the
numbers the kernels' NOTES cite (duration, DRAM / L2 / SM throughput, registers, occupancy,
cycles per issued instruction, spills) and the top stall ncu's CPIStall rule names.

    python3 benchmarks/ncu_summary.py ncu-OP.csv [...]          (a Markdown table on stdout)

The CSVs are those `benchmarks/sweep_h200.sh` writes (SpeedOfLight, Occupancy, WarpStateStats,
MemoryWorkloadAnalysis and LaunchStats sections); a metric a section did not collect is shown
as "-".
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path
from typing import NamedTuple

# (section, metric) -> column; values are printed as ncu wrote them, without its thousands commas
_COLUMNS = {
    ("GPU Speed Of Light Throughput", "Duration"): "duration_us",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "dram_pct",
    ("GPU Speed Of Light Throughput", "L2 Cache Throughput"): "l2_pct",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm_pct",
    ("Launch Statistics", "Registers Per Thread"): "registers",
    ("Launch Statistics", "Waves Per SM"): "waves",
    ("Occupancy", "Theoretical Occupancy"): "occupancy_theoretical_pct",
    ("Occupancy", "Achieved Occupancy"): "occupancy_achieved_pct",
    ("Warp State Statistics", "Warp Cycles Per Issued Instruction"): "cycles_per_issue",
    ("Memory Workload Analysis", "Local Memory Spilling Requests"): "spill_requests",
}
_TIME_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
_STALL = re.compile(r"spends ([\d.]+) cycles being stalled (?:waiting (?:for|on) )?(?:a |an |the )?"
                    r"(.+?)\. .*?about ([\d.]+)% of the total", re.S)


class Launch(NamedTuple):
    launch_id: str
    kernel: str
    grid: str
    block: str
    metrics: dict[str, str]
    top_stall: str


def _number(text: str) -> str:
    return text.replace(",", "")


def _metric_value(row: dict) -> str:
    value = _number(row["Metric Value"])
    if row["Section Name"] == "GPU Speed Of Light Throughput" and row["Metric Name"] == "Duration":
        scale = _TIME_TO_US.get(row["Metric Unit"].strip(), None)
        if scale is None:
            raise ValueError(f"unknown duration unit {row['Metric Unit']!r}")
        return f"{float(value) * scale:.1f}"
    return value


def _top_stall(description: str) -> str:
    match = _STALL.search(description)
    if not match:
        return ""
    cycles, reason, share = match.groups()
    return f"{reason.strip()}: {cycles} cycles, {share}% of the cycles between issues"


def read_launches(path: Path) -> list[Launch]:
    """The launches of one ncu CSV, in profiling order (ncu's log lines before the header are
    skipped; a file without the header is an error naming the file)."""
    lines = [line for line in path.read_text().splitlines() if line.startswith('"')]
    if not lines or not lines[0].startswith('"ID"'):
        raise ValueError(f"{path}: no Nsight Compute CSV header (\"ID\",...) found")
    launches: dict[str, Launch] = {}
    for row in csv.DictReader(lines):
        launch = launches.setdefault(row["ID"], Launch(
            row["ID"], row["Kernel Name"], row["Grid Size"], row["Block Size"], {}, ""))
        column = _COLUMNS.get((row["Section Name"], row["Metric Name"]))
        if column:
            launch.metrics[column] = _metric_value(row)
        if row.get("Rule Name") == "CPIStall" and not launch.top_stall:
            launches[row["ID"]] = launch._replace(top_stall=_top_stall(row["Rule Description"]))
    return list(launches.values())


def markdown(launches_by_file: dict[str, list[Launch]]) -> str:
    head = ["file", "id", "kernel", "grid", "block", *_COLUMNS.values(), "top stall"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, launches in launches_by_file.items():
        for launch in launches:
            cells = [name, launch.launch_id, launch.kernel, launch.grid, launch.block,
                     *(launch.metrics.get(c, "-") for c in _COLUMNS.values()),
                     launch.top_stall or "-"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        tables = {Path(a).name: read_launches(Path(a)) for a in argv}
    except (OSError, ValueError, KeyError) as exc:
        print(f"ncu_summary: {exc}", file=sys.stderr)
        return 2
    print(markdown(tables))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
