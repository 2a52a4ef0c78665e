"""Repeatability: run `atrex check` on one operator N times (fresh worker each time) and report
the spread of each shape's time: (max - min) / median.

    python3 benchmarks/runner_repeat.py REPO OP N OUT.json
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def main(repo: str, op: str, runs: int, out: Path) -> int:
    times: dict[str, list[float]] = {}
    fractions: dict[str, list[float]] = {}
    device = None
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(runs):
            path = Path(tmp) / f"run{index}.json"
            subprocess.run([sys.executable, "-m", "atrex", "check", repo, "--op", op, "--quiet",
                            "--json", str(path)], check=False)
            report = json.loads(path.read_text())
            device = report["device"]
            for shape in report["ops"][0]["shapes"]:
                times.setdefault(shape["id"], []).append(shape["time_ms"])
                fractions.setdefault(shape["id"], []).append(shape["roofline_fraction"])
    shapes = {sid: {"time_ms": values, "roofline_fraction": fractions[sid],
                    "median_ms": statistics.median(values),
                    "spread": (max(values) - min(values)) / statistics.median(values)}
              for sid, values in times.items() if None not in values}
    result = {"repo": repo, "op": op, "runs": runs, "device": device, "shapes": shapes,
              "max_spread": max((s["spread"] for s in shapes.values()), default=None)}
    out.write_text(json.dumps(result, indent=2) + "\n")
    for sid, s in shapes.items():
        print(f"{op}/{sid}: median {s['median_ms']:.4f} ms, spread {s['spread']:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])))
