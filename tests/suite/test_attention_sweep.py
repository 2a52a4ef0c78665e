"""The attention sweep of issue 13 (benchmarks/attention_h200.py): a CPU run tries each
interpreter-visible variant once (the pipeline depth and warps are GPU-only). Every variant's CPU
check and the committed results' summary: tests/suite/test_sweeps_cpu.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "attention_h200.py"


def _sweep_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import attention_h200
    finally:
        sys.path.pop(0)
    return attention_h200


def test_the_cpu_sweep_tries_each_interpreter_visible_variant_once():
    sweep = _sweep_module()
    gpu = sweep.variants(sweep.PLAN, "paged_decode_gqa", quick=False)
    cpu = sweep.variants(sweep.PLAN, "paged_decode_gqa", quick=False, device="cpu")
    assert len(cpu) < len(gpu)
    # the interpreter ignores the pipeline depth, warps and the GPU-only schedule knobs: no two
    # CPU variants differ in those alone
    visible = [json.dumps({k: v for k, v in c.items() if k not in sweep.PLAN.cpu_inert},
                          sort_keys=True) for c in cpu]
    assert len(set(visible)) == len(visible)
