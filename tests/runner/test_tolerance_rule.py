"""The tolerance grounded in the framework's own error (runner/judge/compare.py).

The case: out = x * y - z with z close to x * y, computed in bf16. The product's bf16 rounding
(about 2^-9 of |x y| ~ 10) is far larger than the configured atol 1e-2 on a result near zero, so
PyTorch's own bf16 computation fails the fixed tolerance; the rule lets a candidate be twice as
far off as that, and no more.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from atrex.runner.bench import run_bench
from atrex.runner.config import DEFAULT_TOLERANCES
from atrex.runner.evaluate import EvalOptions
from atrex.runner.judge.compare import REFERENCE_ERROR_MULTIPLE, compare_outputs
from atrex.runner.repo import load_repo

BF16 = DEFAULT_TOLERANCES["bfloat16"]


def _tolerance(dtype):
    return BF16 if dtype == torch.bfloat16 else None


def _cancellation(n: int = 4096, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = (3 + torch.randn(n, generator=g)).to(torch.bfloat16)
    y = (3 + torch.randn(n, generator=g)).to(torch.bfloat16)
    z = (x.double() * y.double() + 0.01 * torch.randn(n, generator=g, dtype=torch.float64)
         ).to(torch.bfloat16)
    oracle = x.double() * y.double() - z.double()
    native = x * y - z  # bf16 arithmetic, as the reference runs at its native dtype
    return oracle, native


def test_the_native_reference_fails_the_fixed_bound_but_passes_its_own_check():
    oracle, native = _cancellation()
    fixed = compare_outputs({"out": native}, {"out": oracle}, _tolerance)
    assert not fixed.ok and "elements outside atol=0.01" in fixed.problem
    own = compare_outputs({"out": native}, {"out": oracle}, _tolerance, native={"out": native})
    assert own.ok, own.problem
    assert own.reference_max_abs_error == pytest.approx(own.max_abs_error)
    assert own.reference_rel_l2_error == pytest.approx(own.rel_l2_error)
    assert own.max_abs_error > BF16.atol


def test_a_candidate_ten_times_less_accurate_fails():
    oracle, native = _cancellation()
    error = native.double() - oracle
    worse = (oracle + 10 * error).to(torch.bfloat16)
    result = compare_outputs({"out": worse}, {"out": oracle}, _tolerance,
                             native={"out": native})
    assert not result.ok
    assert "the reference at its native dtype" in result.problem
    assert f"{REFERENCE_ERROR_MULTIPLE:g}x" in result.problem
    a_bit_worse = (oracle + 1.5 * error).to(torch.bfloat16)
    assert compare_outputs({"out": a_bit_worse}, {"out": oracle}, _tolerance,
                           native={"out": native}).ok


def test_the_configured_bound_still_holds_where_the_reference_is_accurate():
    g = torch.Generator().manual_seed(1)
    oracle = torch.randn(1000, generator=g, dtype=torch.float64)
    native = oracle.to(torch.bfloat16)  # one rounding: far inside atol/rtol
    off = (oracle + 0.5).to(torch.bfloat16)  # wrong by 0.5 everywhere
    result = compare_outputs({"out": off}, {"out": oracle}, _tolerance, native={"out": native})
    assert not result.ok
    slightly = (oracle * 1.015).to(torch.bfloat16)  # inside rtol and rel-L2, 10x the reference
    assert compare_outputs({"out": slightly}, {"out": oracle}, _tolerance,
                           native={"out": native}).ok


def test_masks_leave_undefined_elements_out():
    oracle = torch.zeros(8, dtype=torch.float64)
    cand = torch.zeros(8, dtype=torch.bfloat16)
    cand[6:] = 5.0  # padding rows the operation does not define
    mask = torch.arange(8) < 6
    assert not compare_outputs({"out": cand}, {"out": oracle}, _tolerance).ok
    assert compare_outputs({"out": cand}, {"out": oracle}, _tolerance, masks={"out": mask}).ok


OP_FILES = {
    "reference.py": '''
        import torch


        class Model(torch.nn.Module):
            """x * y - z with z close to x * y: a cancellation, computed in the input dtype."""

            def forward(self, x, y, z):
                return x * y - z
    ''',
    "input.py": '''
        import torch


        def _make_inputs(n):
            x = (3 + torch.randn(n, device="cuda")).to(torch.bfloat16)
            y = (3 + torch.randn(n, device="cuda")).to(torch.bfloat16)
            z = (x.double() * y.double() + 0.01 * torch.randn(n, device="cuda",
                 dtype=torch.float64)).to(torch.bfloat16)
            return {"x": x, "y": y, "z": z}
    ''',
    "kernel.py": '''
        import torch
        import triton
        import triton.language as tl


        @triton.jit
        def _kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
            y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
            z = tl.load(z_ptr + offs, mask=mask).to(tl.float32)
            xy = x * y
            rounded = xy.to(tl.bfloat16).to(tl.float32)
            out = xy + 10.0 * (rounded - xy) - z  # ten times bf16's rounding of the product
            tl.store(out_ptr + offs, out.to(tl.bfloat16), mask=mask)


        class Model(torch.nn.Module):
            def forward(self, x, y, z):
                out = torch.empty_like(x)
                _kernel[(triton.cdiv(x.numel(), 1024),)](x, y, z, out, x.numel(), BLOCK=1024)
                return out
    ''',
}


@pytest.mark.slow
def test_bench_passes_the_eager_reference_and_fails_a_ten_times_worse_kernel(tmp_path):
    op = tmp_path / "cancel"
    op.mkdir()
    for name, text in OP_FILES.items():
        (op / name).write_text(textwrap.dedent(text).lstrip())
    (op / "shapes.json").write_text(json.dumps({"n4096": {"input_kwargs": {"n": 4096}}}))
    repo = load_repo(tmp_path)
    reports = run_bench(repo, ["eager", "kb"], EvalOptions(device="cpu", trials=2))
    (eager,) = reports["eager"].op("cancel").shapes
    assert eager.status.value == "pass", eager.message
    assert eager.max_abs_error > BF16.atol  # beyond the fixed bound, inside its own
    assert eager.reference_max_abs_error == pytest.approx(eager.max_abs_error)
    (kb,) = reports["kb"].op("cancel").shapes
    assert kb.status.value == "incorrect", kb.message
    assert "the reference at its native dtype" in kb.message
    assert Path(reports["kb"].repo) == tmp_path
