"""atrex's work counter against Atrex-Bench's published roofline numbers, shape by shape.

    python benchmarks/atrex_bench_roofline.py PATH/TO/atrex-bench [--ops a,b] [--out DIR]

For every operator directory under PATH/data (reference.py, input.py, shapes.json and the
published roofline.json), atrex counts W and Q of each shape at its real size on this machine
(runner.work.audit in CPU mode: large floating tensors are shapes on the meta device, the index
and routing tensors that decide what is touched are real; seed 0), and compares with the
published W / Q. T_SOL of both is computed on the H200 SXM datasheet (runner/peaks.py): ours with
atrex's classes (runner/work/classes.py), theirs as Atrex-Bench computes it (every FLOP in the
bucket of the op's metadata dtype, rated at that dtype's tensor-core rate; fp32 at 66.9 TFLOP/s).

Writes DIR/atrex-bench-roofline.json (our counts per shape and the ratios to the published
numbers; the published numbers themselves are not copied) and DIR/atrex-bench-roofline.md
(agreement within 1% on Q and on T_SOL, per operator). Nothing of the checkout is copied.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atrex.runner.peaks import datasheet_peaks  # noqa: E402
from atrex.runner.work import classes  # noqa: E402
from atrex.runner.work.audit import CountJob, count_in_subprocess  # noqa: E402

TOLERANCE = 0.01
GPU = "h200_sxm"
# Atrex-Bench's dtype keys -> the H200 rate it applies (configs/hardware paths *_tc, fp32_strict)
THEIR_RATES = {"bf16": 989.4, "fp16": 989.4, "fp8_e4m3": 1978.9, "fp8_e5m2": 1978.9,
               "fp32": 66.9, "fp32_strict": 66.9, "fp32_tf32": 494.7}


def their_sol_ms(entry: dict, bandwidth_tbps: float) -> float | None:
    w = entry.get("semantic_W_flops")
    read, write = entry.get("semantic_Q_read_bytes"), entry.get("semantic_Q_write_bytes")
    if w is None or read is None or write is None:
        return None
    compute = sum(v / THEIR_RATES[k] for k, v in w.items() if v) / 1e9
    return max(compute, (read + write) / (bandwidth_tbps * 1e9))


def ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None:
        return None
    if theirs == 0:
        return 1.0 if ours == 0 else None
    return ours / theirs


def agrees(r: float | None) -> bool:
    return r is not None and abs(r - 1.0) <= TOLERANCE


def compare_op(op_dir: Path, timeout_s: float) -> list[dict]:
    shapes = json.loads((op_dir / "shapes.json").read_text())
    published = json.loads((op_dir / "roofline.json").read_text())["shapes"]
    job = CountJob(op_dir=str(op_dir), mode="cpu",
                   shapes=[{"id": sid, "init_kwargs": s.get("init_kwargs") or {},
                            "input_kwargs": s["input_kwargs"]} for sid, s in shapes.items()])
    began = time.time()
    counts = count_in_subprocess(job, timeout_s=timeout_s)
    print(f"{op_dir.name}: {len(shapes)} shapes counted in {time.time() - began:.0f} s",
          flush=True)
    peaks = datasheet_peaks(GPU)
    rows = []
    for sid in shapes:
        count, theirs = counts[sid], published.get(sid, {})
        row = {"op": op_dir.name, "shape": sid}
        if count.error:
            row["error"] = count.error
            rows.append(row)
            continue
        read = sum(r["nbytes"] for r in count.reads)
        written = sum(w["nbytes"] for w in count.writes)
        sol = classes.sol_ms(count.flops, read + written, peaks.tflops, peaks.bandwidth_tbps)
        their_q = (None if theirs.get("semantic_Q_read_bytes") is None else
                   theirs["semantic_Q_read_bytes"] + theirs["semantic_Q_write_bytes"])
        their_w = sum((theirs.get("semantic_W_flops") or {}).values())
        tensor_w = sum(v for c, v in count.flops.items()
                       if classes.unit(c) == classes.TENSOR_CORE)
        row.update({
            "flops": {k: v for k, v in count.flops.items() if v},
            "bytes_read": read, "bytes_written": written,
            "sol_ms": sol,
            "bound": classes.bound(count.flops, read + written, peaks.tflops,
                                   peaks.bandwidth_tbps),
            "q_ratio": ratio(read + written, their_q),
            "sol_ratio": ratio(sol, their_sol_ms(theirs, peaks.bandwidth_tbps)),
            "tensor_w_ratio": ratio(tensor_w, their_w) if their_w else None,
            "partial": sorted({f"{c['name']}: {c['rule']}" for c in count.reads + count.writes
                               if c["rule"] != "whole"}),
            "whole_tensor_ops": count.conservative_ops,
        })
        rows.append(row)
    return rows


def summary_markdown(rows: list[dict]) -> str:
    ops: dict[str, list[dict]] = {}
    for row in rows:
        ops.setdefault(row["op"], []).append(row)
    counted = [r for r in rows if "error" not in r]
    q_ok = sum(agrees(r["q_ratio"]) for r in counted)
    sol_ok = sum(agrees(r["sol_ratio"]) for r in counted)
    lines = [
        "# atrex's work counter against Atrex-Bench's published roofline numbers",
        "",
        f"`python benchmarks/atrex_bench_roofline.py PATH/TO/atrex-bench` on {len(ops)} "
        f"operators, {len(rows)} shapes ({len(rows) - len(counted)} not counted). T_SOL on the "
        "H200 SXM datasheet for both. Agreement within 1%:",
        "",
        f"- Q (bytes read + written): **{q_ok} / {len(rows)}** shapes",
        f"- T_SOL: **{sol_ok} / {len(rows)}** shapes",
        "",
        "Where they differ, docs/roofline.md gives the argument per operator. Ratios are "
        "atrex / Atrex-Bench (median over the op's shapes, then min - max).",
        "",
        "| operator | shapes | Q within 1% | T_SOL within 1% | Q ratio | T_SOL ratio | "
        "counted partially |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, group in sorted(ops.items()):
        done = [r for r in group if "error" not in r]
        qs = sorted(r["q_ratio"] for r in done if r["q_ratio"] is not None)
        ss = sorted(r["sol_ratio"] for r in done if r["sol_ratio"] is not None)
        partial = sorted({p.split(":")[0] for r in done for p in r["partial"]})
        lines.append(
            f"| {name} | {len(group)} | {sum(agrees(r['q_ratio']) for r in done)} | "
            f"{sum(agrees(r['sol_ratio']) for r in done)} | {_spread(qs)} | {_spread(ss)} | "
            f"{', '.join(partial) or '-'} |")
    errors = [r for r in rows if "error" in r]
    if errors:
        lines += ["", "Not counted:", ""]
        lines += [f"- {r['op']} / {r['shape']}: {r['error'][:200]}" for r in errors]
    return "\n".join(lines) + "\n"


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    mid = values[len(values) // 2]
    if abs(values[0] - values[-1]) < 1e-3:
        return f"{mid:.3f}"
    return f"{mid:.3f} ({values[0]:.3f} - {values[-1]:.3f})"


def environment(checkout: Path) -> dict:
    """Where the counts were made: counted on this machine's CPU (no GPU is involved; T_SOL uses
    the H200's datasheet peaks), with the versions and both commits."""
    import platform
    import subprocess

    import torch
    import triton

    def commit(path: Path) -> str | None:
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                              text=True)
        return done.stdout.strip() or None

    return {"counted_on": f"cpu ({platform.processor() or platform.machine()}, "
                          f"{os.cpu_count()} cores), no GPU",
            "peaks": f"{GPU} datasheet", "python": platform.python_version(),
            "torch": torch.__version__, "triton": triton.__version__,
            "atrex_commit": commit(ROOT), "atrex_bench_commit": commit(checkout)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a local checkout of alibaba/atrex-bench")
    parser.add_argument("--ops", help="comma list of operators (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per operator")
    args = parser.parse_args(argv)
    data = args.checkout / "data"
    if not data.is_dir():
        print(f"error: {data} is not a directory (expected an atrex-bench checkout)",
              file=sys.stderr)
        return 2
    wanted = set(args.ops.split(",")) if args.ops else None
    op_dirs = sorted(p for p in data.iterdir() if (p / "roofline.json").is_file()
                     and (wanted is None or p.name in wanted))
    rows: list[dict] = []
    for op_dir in op_dirs:
        rows += compare_op(op_dir, args.timeout_s)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "atrex-bench-roofline.json").write_text(json.dumps({
        "gpu": GPU, "tolerance": TOLERANCE, "environment": environment(args.checkout),
        "shapes": rows}, indent=1) + "\n")
    text = summary_markdown(rows)
    (args.out / "atrex-bench-roofline.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
