"""The example kernel repository bundled with atrex (examples/kernels) must pass atrex itself.

One CPU evaluation (Triton interpreter, through the runner's sandboxed worker) is shared by the
whole module. The GPU shapes cannot run here, so for them the tests check that the repository
loads and declares them as intended: ids, targets and trace weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from atrex.runner.evaluate import EvalOptions, evaluate_repo
from atrex.runner.model import Report, Status
from atrex.runner.repo import load_repo

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "kernels"
MIN_OWN_SHARE = 0.9

# operator -> {shape id: targets}, as shapes.json should declare them
EXPECTED_SHAPES: dict[str, dict[str, tuple[str, ...]]] = {
    "rmsnorm": {
        "cpu-small": ("cpu",), "decode-64": ("cuda",), "prefill-8192": ("cuda",),
    },
    "fused_add_rmsnorm": {
        "cpu-small": ("cpu",), "decode-64": ("cuda",), "prefill-8192": ("cuda",),
    },
    "silu_and_mul": {
        "cpu-small": ("cpu",), "decode-64": ("cuda",), "prefill-8192": ("cuda",),
    },
    "softmax": {
        "cpu-small": ("cpu",), "cpu-looped": ("cpu",),
        "attn-decode-2048x4096": ("cuda",), "vocab-64x128256": ("cuda",),
    },
}
OPS = sorted(EXPECTED_SHAPES)


@pytest.fixture(scope="module")
def cpu_report() -> Report:
    return evaluate_repo(load_repo(EXAMPLES), EvalOptions(device="cpu"))


def _explain(report: Report, op: str) -> str:
    result = report.op(op)
    lines = [f"{op}: {result.status.value}"]
    lines += [f"  {s.id}: {s.status.value} {s.message or ''}" for s in result.shapes]
    lines += [f"  finding {f.kind.value} {f.file}:{f.line} {f.message}" for f in result.findings]
    return "\n".join(lines)


@pytest.mark.slow
def test_every_operator_is_evaluated(cpu_report: Report) -> None:
    assert sorted(op.name for op in cpu_report.ops) == OPS
    assert cpu_report.status is Status.PASS
    assert not cpu_report.timing_available  # no GPU here: correctness and fallback only


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
def test_operator_passes_on_cpu_with_its_own_kernels(cpu_report: Report, op: str) -> None:
    result = cpu_report.op(op)
    assert result.status is Status.PASS, _explain(cpu_report, op)
    assert result.findings == [], _explain(cpu_report, op)
    assert result.own_kernel_share is not None and result.own_kernel_share >= MIN_OWN_SHARE
    cpu_ids = [sid for sid, targets in EXPECTED_SHAPES[op].items() if "cpu" in targets]
    assert [s.id for s in result.shapes] == cpu_ids
    for shape in result.shapes:
        assert shape.status is Status.PASS, _explain(cpu_report, op)
        assert shape.own_kernel_share is not None and shape.own_kernel_share >= MIN_OWN_SHARE
        assert shape.max_abs_error is not None


@pytest.mark.parametrize("op", OPS)
def test_gpu_shapes_load_as_declared(op: str) -> None:
    spec = load_repo(EXAMPLES, only_ops=[op]).op(op)
    assert {s.id: s.targets for s in spec.shapes} == EXPECTED_SHAPES[op]
    assert spec.dtype == "bf16"
    assert spec.importance is not None and spec.importance > 0
    assert spec.weight_source == "trace"
    gpu = [s for s in spec.shapes if "cuda" in s.targets]
    assert 2 <= len(gpu) <= 4
    for shape in gpu:
        assert shape.weight > 1, f"{op}/{shape.id} has no call_count in metadata.json"
        assert shape.description, f"{op}/{shape.id} does not say where its weight comes from"
