"""Render the README's figures (docs/img/*.png) from committed reports.

    python3 benchmarks/figures.py [OUT_DIR]     # default docs/img

Sources (all committed):
- examples-*: `atrex check examples/kernels` on the H200 (benchmarks/results/h200-judge) and on a
  CPU machine (docs/img/data/examples-cpu.json);
- pr-*: the two H200 runs of examples/kernels as base (h200-runner, commit 28c7f39) and head
  (h200-judge, commit 3dcfa42) of a pull request: same kernels, the measurement changed;
- suite-*: `atrex check benchmarks/suite` on a CPU machine (docs/img/data/suite-cpu.json), and the
  illustrative bench of benchmarks/suite_illustrative.py (times modelled, not measured; the
  figures say so).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from atrex.runner.model import Report
from atrex.runner.plot import fractions_png, roofline_png

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT / "docs" / "img" / "data"


def load(path: Path) -> Report:
    return Report.from_json(path.read_text())


def sources() -> dict[str, tuple]:
    """name -> (draw function, reports, note)"""
    head = load(RESULTS / "h200-judge" / "examples-h200.json")
    base = load(RESULTS / "h200-runner" / "examples-h200.json")
    illustrative = json.loads((DATA / "suite-h200-illustrative.json").read_text())
    bench = {label: Report.from_dict(r) for label, r in illustrative["reports"].items()}
    return {
        "examples-roofline": (roofline_png, head, None),
        "examples-fractions": (fractions_png, head, None),
        "examples-checks-cpu": (roofline_png, load(DATA / "examples-cpu.json"), None),
        "pr-fractions": (fractions_png, {"base": base, "head": head},
                         "base: H200 run at 28c7f39, head: at 3dcfa42 (same kernels)"),
        "suite-roofline": (roofline_png, bench, illustrative["note"]),
        "suite-fractions": (fractions_png, bench, illustrative["note"]),
        "suite-checks-cpu": (roofline_png, load(DATA / "suite-cpu.json"), None),
    }


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for name, (draw, reports, note) in sources().items():
        path = draw(reports, out / f"{name}.png", note=note)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img"))
