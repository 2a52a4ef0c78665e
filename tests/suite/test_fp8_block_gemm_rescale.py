"""fp8_block_gemm's RESCALE path (the running sum divided by the K group's scale, carried in the
dot's accumulator) under the Triton interpreter, against a float64 product, with activation
scales spread over six decades so every rescale ratio is far from 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .op_script import LOAD_OP_FILES, last_json

ROOT = Path(__file__).resolve().parents[2]
OP = ROOT / "benchmarks" / "suite" / "fp8_block_gemm"

# Runs in a child: TRITON_INTERPRET must be set before triton is imported.
CHECK = LOAD_OP_FILES + r"""
import json
import torch

kernel, inputs = load("kernel"), load("input")
for name, value in json.loads(sys.argv[2]).items():
    setattr(kernel, name, value)
m, n, k = json.loads(sys.argv[3])
g = torch.Generator().manual_seed(7)
x = torch.randn(m, k, generator=g).bfloat16()
w = (torch.randn(n, k, generator=g) * k ** -0.5).bfloat16()
a, a_scale = inputs._quant_blocks(x, 1, 128)
b, b_scale = inputs._quant_blocks(w, 128, 128)
a_scale = a_scale * torch.logspace(-3, 3, a_scale.numel()).view_as(a_scale)
groups = (k + 127) // 128
a64 = a.double() * a_scale.double().repeat_interleave(128, 1)[:, :k]
b64 = b.double() * b_scale.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
want = a64 @ b64.T
got = kernel.fp8_block_gemm(a, a_scale, b, b_scale).double()
scale = want.abs().amax(dim=1, keepdim=True)
print(json.dumps({"err": ((got - want).abs() / scale).max().item()}))
"""


def _relative_error(constants: dict, shape: tuple[int, int, int]) -> float:
    return last_json(CHECK, str(OP), json.dumps(constants), json.dumps(shape))["err"]


@pytest.mark.parametrize("constants", [
    {"RESCALE": True},
    {"RESCALE": True, "BLOCK_M": 128, "NUM_WARPS": 8},
    {"RESCALE": True, "BLOCK_N": 256},  # two weight-scale blocks a tile: per-column ratios
], ids=["64x128", "128x128", "64x256"])
def test_rescaled_sum_matches_the_float64_product(constants):
    # ragged M and N, K of 3 groups with a partial last one, several tiles per program
    error = _relative_error(constants, (150, 300, 320))
    assert error < 8e-3  # bf16 output: a half-ulp is 2^-9 of the row's largest value


def test_the_accumulation_error_script_measures_against_the_reference_product():
    """benchmarks/fp8_accumulation_error.py's exact product is the reference's, in float64."""
    import importlib.util

    import torch

    def load(path, name):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    script = load(ROOT / "benchmarks" / "fp8_accumulation_error.py", "fp8_accumulation_error")
    reference = load(OP / "reference.py", "fp8_reference").Model()
    g = torch.Generator().manual_seed(0)
    a = torch.randn(5, 300, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(130, 300, generator=g).to(torch.float8_e4m3fn)
    a_scale = torch.rand(5, 3, generator=g, dtype=torch.float64) + 0.5
    b_scale = torch.rand(2, 3, generator=g, dtype=torch.float64) + 0.5
    exact = script._exact(a, a_scale, b, b_scale)
    assert torch.equal(exact.to(torch.bfloat16), reference(a, a_scale, b, b_scale))
    errors = script._errors(exact.to(torch.bfloat16), exact)
    assert 0 < errors["rel_l2"] < 2 ** -8 and errors["max_over_absmax"] < 2 ** -8
