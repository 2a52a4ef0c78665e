"""Naive softmax on purpose: one row per program, three passes of 64 columns, one warp."""

import torch
import triton
import triton.language as tl

BLOCK_SIZE = 64
NUM_WARPS = 1


@triton.jit
def _softmax_naive(x_ptr, y_ptr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    row_max = tl.full([BLOCK_SIZE], float("-inf"), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        row_max = tl.maximum(row_max, x)
    m = tl.max(row_max, axis=0)
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        acc += tl.exp(x - m)
    denom = tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_row + cols, (tl.exp(x - m) / denom).to(y_ptr.dtype.element_ty), mask=mask)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2)
        _softmax_naive[(x2.shape[0],)](x2, y, x2.shape[1], BLOCK_SIZE=BLOCK_SIZE,
                                       num_warps=NUM_WARPS)
        return y.view_as(x)
