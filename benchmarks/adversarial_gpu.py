"""Run the adversarial corpus on a GPU and write what each candidate got, against what it should.

    python3 benchmarks/adversarial_gpu.py OUT.json [CASE ...]

With case names (e.g. honest/plain_rmsnorm cheats/side_stream), only those run.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atrex.runner.evaluate import EvalOptions  # noqa: E402

from tests.adversarial import corpus  # noqa: E402


def main(out: Path, only: list[str]) -> int:
    cases = [c for c in corpus.load_cases() if not only or c.name in only]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for batch in corpus.batches(cases):
            reports = corpus.run_batch(Path(tmp), batch, EvalOptions(device="cuda", timeout_s=30))
            for case in batch:
                report = reports[case.name]
                op = report.op(case.op)
                rows.append({
                    "case": case.name, "expected": case.expected, "status": op.status.value,
                    "ok": case.status_ok(op.status.value, "cuda")
                    and case.finding_ok({f.kind.value for f in op.findings}),
                    "findings": sorted({f.kind.value for f in op.findings}),
                    "shapes": [{"id": s.id, "status": s.status.value, "message": s.message,
                                "time_ms": s.time_ms, "timing_judge_ms": s.timing_judge_ms,
                                "roofline_fraction": s.roofline_fraction}
                               for s in op.shapes]})
                device = report.device
            result = {"device": {"name": device.name, "driver": device.driver,
                                 "torch": device.torch, "triton": device.triton,
                                 "python": device.python},
                      "passed": sum(r["ok"] for r in rows), "total": len(rows), "cases": rows}
            out.write_text(json.dumps(result, indent=2) + "\n")  # after every batch
    for row in rows:
        print(f"{'ok ' if row['ok'] else 'BAD'} {row['case']:40s} expected {row['expected']:14s} "
              f"got {row['status']}")
    return 0 if result["passed"] == result["total"] else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
