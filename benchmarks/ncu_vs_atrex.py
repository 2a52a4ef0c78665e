"""One kernel timed two ways: atrex's timing loop and Nsight Compute's gpu__time_duration.

    python3 benchmarks/ncu_vs_atrex.py driver OP_DIR SHAPE_ID N   # (run under ncu) N launches
    python3 benchmarks/ncu_vs_atrex.py compare NCU_CSV ATREX_JSON OP SHAPE_ID OUT.json
"""

from __future__ import annotations

import csv
import importlib.util
import json
import statistics
import sys
from pathlib import Path


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def driver(op_dir: Path, shape_id: str, launches: int) -> None:
    import torch

    shape = json.loads((op_dir / "shapes.json").read_text())[shape_id]
    inputs = _load(op_dir / "input.py", "inputs")._make_inputs(**shape["input_kwargs"])
    model = _load(op_dir / "kernel.py", "kernel").Model(**(shape["init_kwargs"] or {})).cuda()
    with torch.no_grad():
        for _ in range(launches):
            model(**inputs)
    torch.cuda.synchronize()


def compare(ncu_csv: Path, atrex_json: Path, op: str, shape_id: str, out: Path) -> None:
    durations = []
    with open(ncu_csv, newline="") as handle:
        rows = [line for line in handle if line.startswith('"')]
    for row in csv.DictReader(rows):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            value = float(row["Metric Value"].replace(",", ""))
            unit = row.get("Metric Unit", "nsecond")
            scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0}.get(unit, 1e-6)
            durations.append(value * scale)
    report = json.loads(atrex_json.read_text())
    shape = next(s for o in report["ops"] if o["name"] == op for s in o["shapes"]
                 if s["id"] == shape_id)
    ncu_ms = statistics.median(durations[1:]) if len(durations) > 1 else durations[0]
    result = {"op": op, "shape": shape_id, "ncu_gpu_time_duration_ms": ncu_ms,
              "ncu_samples": len(durations), "atrex_time_ms": shape["time_ms"],
              "atrex_timing_method": shape["timing_method"],
              "relative_difference": (shape["time_ms"] - ncu_ms) / ncu_ms,
              "device": report["device"]}
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    if sys.argv[1] == "driver":
        driver(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        compare(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5], Path(sys.argv[6]))
