"""benchmarks/ncu_summary.py on Nsight Compute output committed from the H200 (the attention
kernels at 893c4d2): one row per profiled launch with the numbers the kernels' NOTES cite, and a
clear error, exit code 2, for a file that is not ncu's CSV."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "ncu_summary.py"
NCU = ROOT / "benchmarks" / "results" / "h200-attention" / "bench-893c4d2"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def _rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_one_row_per_launch_with_the_cited_numbers():
    result = _run(NCU / "ncu-mla_paged_decode.csv", NCU / "ncu-paged_decode_gqa.csv")
    assert result.returncode == 0, result.stderr
    rows = _rows(result.stdout)
    assert [r[2] for r in rows] == ["_mla_decode_split_kernel", "_merge_splits_kernel"] * 2 + [
        "_paged_decode_split_kernel", "_merge_splits_kernel"]
    paged = rows[4]
    # the paged split kernel's line in paged_decode_gqa/NOTES.md: 103 us, 83% of DRAM peak,
    # 96 registers, 31% theoretical occupancy, 14.5 cycles per issue, global-load scoreboard first
    assert paged[5:8] == ["103.1", "83.27", "87.97"]
    assert paged[9] == "96" and paged[11] == "31.25" and paged[13] == "14.51"
    assert paged[-1].startswith("scoreboard dependency on a L1TEX")
    assert "7.7 cycles, 52.8%" in paged[-1]


def test_spills_and_a_launch_without_a_stall_rule():
    result = _run(NCU / "ncu-prefill_attention_gqa.csv")
    assert result.returncode == 0, result.stderr
    (row,) = _rows(result.stdout)
    assert row[9] == "255" and row[14] == "450560"  # registers, local-memory spill requests
    assert row[-1] == "-"


def test_a_file_that_is_not_ncu_csv_is_refused(tmp_path):
    bogus = tmp_path / "ncu-x.csv"
    bogus.write_text("==PROF== Connected to process 1\nnot a table\n")
    result = _run(bogus)
    assert result.returncode == 2
    assert str(bogus) in result.stderr and "no Nsight Compute CSV header" in result.stderr
