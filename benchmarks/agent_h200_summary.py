"""Before/after table of an agent_h200.sh run: reads <out>/<op>/summary.json and attempts.jsonl."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def _f(value, fmt="{:.3f}"):
    return "–" if value is None else fmt.format(value)


def op_section(out: Path, op: str) -> tuple[str, list[str]]:
    summary_path = out / op / "summary.json"
    if not summary_path.is_file():
        return f"| {op} | no summary (the run failed; see {op}.log) | | | | | |", []
    s = json.loads(summary_path.read_text())
    attempts = [json.loads(line) for line in (out / op / "attempts.jsonl").read_text()
                .splitlines() if line.strip()]
    before, after = s["before"], s["after"]
    t0, t1 = before.get("weighted_time_ms"), after.get("weighted_time_ms")
    speedup = _f(t0 / t1, "{:.2f}x") if t0 and t1 else "–"
    winners = [f"{a['attempt']}:{a['proposer']}" for a in attempts if a["accepted"]
               and a["iteration"] > 0]
    statuses = Counter(a["status"] for a in attempts if a["iteration"] > 0)
    row = (f"| {op} | {before['status']} -> {after['status']} | "
           f"{_f(before.get('roofline_fraction'))} -> {_f(after.get('roofline_fraction'))} | "
           f"{speedup} | {', '.join(winners) or 'none'} | "
           f"{', '.join(f'{n} {k}' for k, n in statuses.most_common())} | "
           f"{s['gpu_seconds'] / 60:.1f} | {s['stop_reason']} |")
    shapes = []
    after_shapes = {x["id"]: x for x in after["shapes"]}
    for b in before["shapes"]:
        a = after_shapes.get(b["id"], {})
        ratio = b["time_ms"] / a["time_ms"] if b.get("time_ms") and a.get("time_ms") else None
        shapes.append(f"| {op} | {b['id']} | {_f(b.get('time_ms'), '{:.4g}')} | "
                      f"{_f(a.get('time_ms'), '{:.4g}')} | {_f(ratio, '{:.2f}x')} | "
                      f"{_f(b.get('roofline_fraction'))} -> {_f(a.get('roofline_fraction'))} |")
    return row, shapes


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    ops = argv[1:] or sorted(p.name for p in out.iterdir() if (p / "summary.json").is_file())
    rows, shapes = [], []
    for op in ops:
        row, op_shapes = op_section(out, op)
        rows.append(row)
        shapes += op_shapes
    env = (out / "environment.txt").read_text() if (out / "environment.txt").is_file() else ""
    print("# atrex agent on naive kernels: before/after\n")
    print("Final numbers come from one interleaved before/after runner evaluation per operator "
          "(roofline fraction = GPU-hour efficiency E_op of the operator's shapes, uniform "
          "weights).\n")
    print("| op | status | roofline fraction | speedup | accepted (attempt:proposer) | "
          "attempts | device-min | stopped |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n| op | shape | before ms | after ms | speedup | roofline fraction |")
    print("|---|---|---|---|---|---|")
    print("\n".join(shapes))
    print("\n```\n" + env.strip() + "\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
