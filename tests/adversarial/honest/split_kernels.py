# atrex-test: op=rmsnorm expected=pass
"""Honest, split across two kernels: per-row inverse RMS into a buffer, then the scaling."""
import torch
import triton
import triton.language as tl


@triton.jit
def _inv_rms(x_ptr, inv_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(inv_ptr + row, 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps))


@triton.jit
def _scale(x_ptr, w_ptr, inv_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, x * tl.load(inv_ptr + row) * w, mask=mask)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        inv = torch.empty(rows, dtype=torch.float32, device=x.device)
        y = torch.empty_like(x)
        _inv_rms[(rows,)](x, inv, cols, self.eps, BLOCK=block)
        _scale[(rows,)](x, weight, inv, y, cols, BLOCK=block)
        return y
