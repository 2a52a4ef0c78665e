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


def test_barriers_inside_a_loop_body_are_counted_per_loop():
    spec = importlib.util.spec_from_file_location("compile_sm90", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    ptx = "\n".join([
        "\tbar.sync \t0;",  # before any loop
        "$L__BB0_2:",
        "\tld.global.b32 { %r1 }, [ %rd1 + 0 ];",
        "\tbar.sync \t0;",
        "\tst.shared.b32 [%r2], %r1;",
        "\tbar.sync \t0;",
        "\t@%p1 bra \t$L__BB0_2;",
        "$L__BB0_3:                              // %.lr.ph",
        "\tld.global.v4.b32 { %r3, %r4, %r5, %r6 }, [ %rd2 + 0 ];",
        "\t@%p2 bra \t$L__BB0_3;",
        "\t@%p3 bra \t$L__BB0_9;",  # forward: not a loop
        "\tbar.sync \t0;",
        "$L__BB0_9:",
    ])
    assert tool._loop_barriers(ptx) == 2
    outer = "\n".join(["$L__BB1_1:", "\tbar.sync \t0;", "\tbar.sync \t0;", "\tbar.sync \t0;",
                       "$L__BB1_2:", "\tbar.sync \t0;", "\t@%p1 bra \t$L__BB1_2;",
                       "\t@%p2 bra \t$L__BB1_1;"])
    assert tool._loop_barriers(outer) == 1  # the inner loop's; the outer body's prologue aside
    assert tool._loop_barriers("$L__BB0_1:\n\tadd.s32 %r1, %r1, 1;\n\tbra.uni \t$L__BB0_1;") == 0
