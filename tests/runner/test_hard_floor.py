"""`suspicious` for a time under the floor no kernel can go below, not under T_SOL itself.

T_SOL also charges the reference's CUDA-core work, which a kernel may do at a higher rate than
counted (a multiply-and-sum recurrence run as chunked matmuls, a cheaper formula for a function):
beating it is reported, while beating the bytes and the tensor-core work is judged."""

from __future__ import annotations

import pytest
from atrex.agent.decision import decide
from atrex.agent.measure import Measurement, ShapeNumbers
from atrex.runner import scoring
from atrex.runner.evaluate import _apply_timing
from atrex.runner.model import ShapeResult, Status
from atrex.runner.peaks import datasheet_peaks
from atrex.runner.work import classes

H200 = datasheet_peaks("h200_sxm")
# 4.8 MB moved: 1 us on the H200; 669 MFLOP of fp32 vector work: 10 us on its CUDA cores
VECTOR_HEAVY = {"fp32_vector": 669e6}
NBYTES = 4.8e6


def _timing(ms: float) -> dict:
    return {"median_ms": ms, "mean_ms": ms, "method": "cuda_events", "reps": 50, "rse": 0.005}


def _shape() -> ShapeResult:
    shape = ShapeResult(id="s", status=Status.PASS, weight=1.0, flops_by_class=VECTOR_HEAVY,
                        bytes=NBYTES)
    shape.sol_ms = scoring.sol_ms(VECTOR_HEAVY, NBYTES, H200)
    shape.hard_floor_ms = scoring.hard_floor_ms(VECTOR_HEAVY, NBYTES, H200)
    return shape


def test_the_hard_floor_is_bytes_and_tensor_core_work():
    assert classes.sol_ms(VECTOR_HEAVY, NBYTES, H200.tflops, 4.8) == pytest.approx(0.01)
    assert classes.hard_floor_ms(VECTOR_HEAVY, NBYTES, H200.tflops, 4.8) == pytest.approx(0.001)
    tensor = {"bf16": 989.4e9 * 0.002, **VECTOR_HEAVY}  # 2 us of bf16 matmul work
    assert classes.hard_floor_ms(tensor, NBYTES, H200.tflops, 4.8) == pytest.approx(0.002)


def test_beating_the_cuda_core_work_is_reported_not_judged():
    shape = _shape()
    _apply_timing(shape, _timing(0.004))  # 2.5x under T_SOL, 4x over the hard floor
    assert shape.status is Status.PASS
    assert shape.roofline_fraction == pytest.approx(2.5)
    assert "faster than T_SOL" in shape.message and "CUDA-core work" in shape.message


def test_beating_the_bytes_is_suspicious():
    shape = _shape()
    _apply_timing(shape, _timing(0.0005))  # half the time the bytes take
    assert shape.status is Status.SUSPICIOUS
    assert "faster than the hardware floor 0.001 ms" in shape.message


def test_the_agent_rejects_by_the_same_rule():
    def measured(ms: float) -> Measurement:
        shape = _shape()
        numbers = ShapeNumbers(
            id="s", status="pass", weight=1.0, time_ms=ms, sol_ms=shape.sol_ms, timing_rse=0.005,
            timing_reps=50, roofline_fraction=shape.sol_ms / ms, own_kernel_share=1.0,
            bound="compute", timing_method="cuda_events", message=None,
            hard_floor_ms=shape.hard_floor_ms)
        return Measurement(status="pass", own_kernel_share=1.0, shapes=[numbers], message=None,
                           timing_source="runner", findings=[])

    assert decide(measured(0.004), measured(0.008)).accepted
    rejected = decide(measured(0.0005), measured(0.008))
    assert not rejected.accepted and rejected.status == "suspicious"
