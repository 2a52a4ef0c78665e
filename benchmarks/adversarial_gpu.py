"""Run the adversarial corpus on a GPU and write what each candidate got, against what it should.

    python3 benchmarks/adversarial_gpu.py OUT.json [CASE ...] [--resume EARLIER.json]

With case names (e.g. honest/plain_rmsnorm cheats/side_stream), only those run, in that order.
--resume runs the cases an earlier run (cut short by its device lease) did not reach or got wrong;
the new JSON also holds the earlier run's expected rows (`resumed_from`), so it covers them all.
The candidates of one op share a judge in batches of BATCH_SIZE, and the JSON is rewritten after
each batch: a run cut short by its deadline keeps what it judged (the whole corpus's rmsnorm
candidates in one batch outlasted a 5-minute run on the H200).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atrex.runner.evaluate import EvalOptions  # noqa: E402

from tests.adversarial import corpus  # noqa: E402

BATCH_SIZE = 6


def still_to_run(cases: list, earlier: dict) -> list:
    """The cases an earlier run's JSON has no row for, or a row that was not as expected."""
    done = {row["case"] for row in earlier["cases"] if row["ok"]}
    return [case for case in cases if case.name not in done]


def carried_over(cases: list, earlier: dict, source: str) -> list[dict]:
    """The earlier run's rows that were as expected, for the cases asked for, each naming the
    file it came from: a resumed run's JSON holds them beside its own rows, so it is the record
    of the whole corpus."""
    wanted = {case.name for case in cases}
    return [{**row, "resumed_from": source} for row in earlier["cases"]
            if row["ok"] and row["case"] in wanted]


def main(out: Path, only: list[str], resume: Path | None = None) -> int:
    cases = corpus.load_cases()
    if only:
        by_name = {c.name: c for c in cases}
        cases = [by_name[name] for name in only]
    rows = []
    if resume is not None:
        earlier = json.loads(resume.read_text())
        rows = carried_over(cases, earlier, str(resume))
        cases = still_to_run(cases, earlier)
    if not cases:
        print("nothing to run", flush=True)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for batch in corpus.batches(cases, BATCH_SIZE):
            reports = corpus.run_batch(Path(tmp), batch, EvalOptions(device="cuda", timeout_s=30))
            for case in batch:
                report = reports[case.name]
                op = report.op(case.op)
                rows.append({
                    "case": case.name, "expected": case.expected, "status": op.status.value,
                    "ok": case.verdict_ok(op.status.value, {f.kind.value for f in op.findings},
                                          "cuda"),
                    "findings": sorted({f.kind.value for f in op.findings}),
                    "shapes": [{"id": s.id, "status": s.status.value, "message": s.message,
                                "time_ms": s.time_ms, "timing_judge_ms": s.timing_judge_ms,
                                "roofline_fraction": s.roofline_fraction}
                               for s in op.shapes]})
                device = report.device
                print(_line(rows[-1]), flush=True)
            result = {"device": {"name": device.name, "driver": device.driver,
                                 "torch": device.torch, "triton": device.triton,
                                 "python": device.python},
                      "passed": sum(r["ok"] for r in rows), "total": len(rows), "cases": rows}
            out.write_text(json.dumps(result, indent=2) + "\n")  # after every batch
    return 0 if result["passed"] == result["total"] else 1


def _line(row: dict) -> str:
    return (f"{'ok ' if row['ok'] else 'BAD'} {row['case']:40s} expected {row['expected']:14s} "
            f"got {row['status']} {','.join(row['findings'])}")


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--resume", type=Path, default=None)
    args = parser.parse_args(argv)
    return main(args.out, args.cases, args.resume)


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
