"""Naive fused add + RMSNorm on purpose: one row per program, 64 columns at a time, one warp."""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rmsnorm_naive(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_cols, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    base = row * n_cols
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        h = x + r
        tl.store(h_ptr + base + cols, h.to(h_ptr.dtype.element_ty), mask=mask)
        acc += h * h
    inv_rms = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + cols, ((x + r) * inv_rms * w).to(y_ptr.dtype.element_ty),
                 mask=mask)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        r2 = residual.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        h = torch.empty_like(x2)
        _add_rmsnorm_naive[(x2.shape[0],)](x2, r2, weight, y, h, x2.shape[1], self.eps,
                                           BLOCK_SIZE=64, num_warps=1)
        return {"out": y.view_as(x), "residual": h.view_as(x)}
