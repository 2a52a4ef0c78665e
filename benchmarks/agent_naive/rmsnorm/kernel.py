"""Naive RMSNorm on purpose: one row per program, 64 columns at a time, one warp, two passes."""

import torch
import triton
import triton.language as tl

BLOCK_SIZE = 64
NUM_WARPS = 1


@triton.jit
def _rmsnorm_naive(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                   BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    inv_rms = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1])
        y = torch.empty_like(x2)
        _rmsnorm_naive[(x2.shape[0],)](x2, weight, y, x2.shape[1], x2.stride(0), y.stride(0),
                                       self.eps, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
        return y.view_as(x)
