"""The Markdown report and the terminal's reasons, rendered from committed reports: relative error
beside absolute, no floors on a CPU run, `n/a (<why>)` for every missing value, weights in
percent everywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

from atrex.runner.model import Report, Status
from atrex.runner.render import markdown
from atrex.runner.termout import reasons, verdict_line

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "img" / "data"


def _table_rows(text: str, header_start: str) -> list[list[str]]:
    """The rows of every Markdown table whose header starts with `header_start`."""
    found, inside = [], False
    for line in text.splitlines():
        if line.startswith(f"| {header_start} |"):
            inside, header = True, [c.strip() for c in line.strip("|").split("|")]
            continue
        if inside and line.startswith("|---"):
            continue
        if inside and line.startswith("|"):
            found.append(dict(zip(header, [c.strip() for c in line.strip("|").split("|")],
                                  strict=True)))
        else:
            inside = False
    return found


def test_cpu_report_has_no_floors_and_labelled_percent_weights():
    report = Report.from_json((DATA / "examples-cpu.json").read_text())
    text = markdown(report)
    assert "µs" not in text and "Floor" not in text and "Roofline fraction" not in text
    assert "**Score:** n/a (no GPU)" in text
    ops = _table_rows(text, "Operator")
    assert {"Weight (% of GPU time)", "Own-kernel share"} <= set(ops[0])
    assert all(re.fullmatch(r"[\d.]+%", row["Weight (% of GPU time)"]) for row in ops)
    shapes = _table_rows(text, "Shape")
    assert len(shapes) == sum(len(op.shapes) for op in report.ops)
    for row in shapes:
        assert re.fullmatch(r"[\d.]+%", row["Weight (% of calls)"]), row
        assert re.fullmatch(r"\S+e[-+]\d+ / \S+e[-+]\d+", row["Max error (abs / rel)"]), row
    softmax = [r for r in shapes if r["Shape"] in ("`cpu-small`", "`cpu-looped`")][-2:]
    assert sum(float(r["Weight (% of calls)"].rstrip("%")) for r in softmax) == 100


def test_gpu_report_says_why_a_value_is_missing():
    doc = json.loads((DATA / "suite-h200-illustrative.json").read_text())
    report = Report.from_dict(doc["reports"]["kb"])
    text = markdown(report)
    assert "0.000" not in text
    ops = {row["Operator"]: row for row in _table_rows(text, "Operator")}
    assert ops["`rope`"]["Roofline fraction (GPU-hour)"] == "0 (runtime_error)"
    assert ops["`gemm_prefill`"]["Roofline fraction (GPU-hour)"] == "0.620"
    shapes = _table_rows(text, "Shape")
    crashed = next(r for r in shapes if r["Status"].endswith("runtime_error"))
    assert crashed["Time"] == crashed["Roofline"] == "n/a (runtime_error)"
    assert crashed["Floor (SOL)"].endswith("µs")  # the floor exists whatever the kernel did
    cells = [c for row in shapes for c in row.values()]
    assert not [c for c in cells if c in ("—", "n/a", "")]


def test_gpu_report_shows_relative_beside_absolute_error():
    report = Report.from_json(
        (ROOT / "benchmarks/results/h200-judge/examples-h200.json").read_text())
    rows = _table_rows(markdown(report), "Shape")
    first = report.ops[0].shapes[0]
    assert rows[0]["Max error (abs / rel)"] == (f"{first.max_abs_error:.2e} / "
                                                f"{first.max_rel_error:.2e}")
    assert rows[0]["Floor (SOL)"].endswith("µs") and rows[0]["Roofline"] == "0.188"


def test_a_time_that_holds_for_the_judged_draw_only_is_said_so():
    """The sampling kernel on the H200 (results/h200-baac206): 583.8 us on the judge's draw,
    58.1 on the calls on new values."""
    doc = json.loads((ROOT / "benchmarks/results/h200-baac206/sampling-bench/"
                      "h200-suite.reports.json").read_text())
    kb = markdown(Report.from_dict(doc["reports"]["kb"]))
    assert ("Times that depend on the input values (they hold for the judged draw only):\n"
            "- `decode-b64-v151936`: 584 µs a call on the timed draw, 58.1 µs on new values"
            ) in kb
    assert "Times that depend" not in markdown(Report.from_dict(doc["reports"]["eager"]))


def test_reasons_group_shapes_and_carry_the_first_line():
    doc = json.loads((DATA / "suite-h200-illustrative.json").read_text())
    report = Report.from_dict(doc["reports"]["kb"])
    found = {(r.op, r.shapes): r for r in reasons(report, "kb")}
    kv = found[("kv_cache_append", ("prefill-t8192",))]
    assert kv.status is Status.SUSPICIOUS and kv.text.startswith("after timing, new values")
    assert kv.line().startswith("kb: kv_cache_append / prefill-t8192: suspicious: after timing")
    assert {key[0] for key in found} == {"kv_cache_append", "fused_add_rmsnorm", "rope"}
    assert verdict_line(report) == ("atrex check: suspicious: 11/14 operators pass, "
                                    "1 suspicious, 2 runtime_error; score 0.496 (datasheet "
                                    "peaks)")
