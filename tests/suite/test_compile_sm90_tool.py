"""benchmarks/suite/tools/compile_sm90.py reads ptxas's performance advisories (no GPU needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "benchmarks" / "suite" / "tools" / "compile_sm90.py"


def test_ptxas_performance_advisories_are_reported_by_code():
    spec = importlib.util.spec_from_file_location("compile_sm90", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    output = (
        "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
        "serialized due to non wgmma instructions defining accumulator registers of a wgmma "
        "between start and end of the pipeline stage in the function 'k'\n"
        "ptxas info    : Used 243 registers, used 1 barriers\n")
    assert tool._advisories(output) == ["C7515"]
    assert tool._advisories("ptxas info    : Used 96 registers\n") == []
