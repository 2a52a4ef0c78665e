"""bfloat16 arithmetic in Triton's interpreter (runner/executor/interp_bf16.py): on values, each
operation rounded to nearest even as on a GPU, the same bits torch's CPU bfloat16 gives."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
from atrex.runner.executor.interp_bf16 import to_bfloat16, to_float32


def test_rounding_to_nearest_even_and_nan():
    one_and_half_ulp = np.float32(1 + 2**-8)  # halfway between 1 and 1 + 2**-7
    assert to_float32(to_bfloat16(one_and_half_ulp)) == 1.0  # the tie goes to the even one
    assert to_float32(to_bfloat16(np.float32(1 + 3 * 2**-8))) == 1 + 2**-6
    assert to_float32(to_bfloat16(np.float32(-2.5))) == -2.5
    assert to_float32(to_bfloat16(np.float32(np.inf))) == np.inf
    assert np.isnan(to_float32(to_bfloat16(np.float32(np.nan))))
    values = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 100
    assert np.array_equal(to_float32(to_bfloat16(values)), _torch_round(values))


def _torch_round(values: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(values).bfloat16().float().numpy()


KERNELS = textwrap.dedent('''
    import torch, triton, triton.language as tl
    from atrex.runner.executor import interp_bf16
    interp_bf16.install()

    @triton.jit
    def elementwise(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        a = tl.load(a_ptr + i)
        b = tl.load(b_ptr + i)
        tl.store(out_ptr + i, a * b)
        tl.store(out_ptr + N + i, a + b)
        tl.store(out_ptr + 2 * N + i, -a - b)
        tl.store(out_ptr + 3 * N + i, tl.where(a < b, a, b))
        tl.store(out_ptr + 4 * N + i, (a.to(tl.float32) * 1.7).to(tl.bfloat16))
        tl.store(out_ptr + 5 * N + i, tl.maximum(a, b))

    @triton.jit
    def reduce_and_dot(a_ptr, out_ptr, dot_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r)
        tl.store(out_ptr + 0, tl.max(a, axis=0))
        tl.store(out_ptr + 1, tl.min(a, axis=0))
        tl.store(out_ptr + 2 + r, tl.cumsum(a, axis=0))
        m = tl.load(a_ptr + r[:, None] * 0 + r[None, :])  # N x N, every row a
        tl.store(dot_ptr + r[:, None] * N + r[None, :], tl.dot(m, m))

    torch.manual_seed(0)
    n = 16
    a, b = torch.randn(n).bfloat16(), torch.randn(n).bfloat16()
    out = torch.empty(6 * n, dtype=torch.bfloat16)
    elementwise[(1,)](a, b, out, N=n)
    want = torch.cat([a * b, a + b, -a - b, torch.where(a < b, a, b),
                      (a.float() * 1.7).bfloat16(), torch.maximum(a, b)])
    assert torch.equal(out, want), (out - want).abs().max()
    red = torch.empty(2 + n, dtype=torch.bfloat16)
    dot = torch.empty(n, n)
    reduce_and_dot[(1,)](a, red, dot, N=n)
    assert red[:2].tolist() == [a.max().item(), a.min().item()], red
    assert torch.equal(red[2:], a.float().cumsum(0).bfloat16()), red
    full = a.float()[None, :].expand(n, n)
    assert torch.allclose(dot, full @ full, rtol=1e-5, atol=1e-5)
    print("ok")
''')


def test_bf16_kernels_compute_what_torch_computes_under_the_interpreter(tmp_path):
    script = tmp_path / "kernels.py"
    script.write_text(KERNELS)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
