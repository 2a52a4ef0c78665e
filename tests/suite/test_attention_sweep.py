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
    assert {c["NUM_STAGES"] for c in cpu} == {2}  # the interpreter ignores the pipeline depth
    assert len({json.dumps(c, sort_keys=True) for c in cpu}) == len(cpu)
