"""Softmax over the last dimension, fp32 math, output in the input dtype (atrex knowledge base).

Rows that fit in registers (next_pow2(n) <= MAX_FUSED_COLS) are read once and written once, several
short rows per program. Longer rows use an online softmax: one pass keeps a running max and a
rescaled running sum, a second pass writes exp(x - max) / sum, so each element is read twice, not
three times.
"""

import torch
import triton
import triton.language as tl

MAX_FUSED_COLS = 16384
TILE_ELEMS = 4096
ELEMS_PER_WARP = 512
MAX_WARPS = 16
WIDE_CHUNK = 4096


@triton.jit
def _softmax_tile(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
                  ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask,
                other=float("-inf")).to(tl.float32)
    row_max = tl.max(x, axis=1)
    row_max = tl.where(row_max == float("-inf"), 0.0, row_max)  # fully masked padding rows
    e = tl.exp(x - row_max[:, None])
    denom = tl.sum(e, axis=1)
    denom = tl.where(denom == 0.0, 1.0, denom)
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :],
             (e / denom[:, None]).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_online(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    run_max = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, x)
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
        run_sum = run_sum * tl.exp(run_max - safe_max) + tl.exp(x - safe_max)
        run_max = new_max
    row_max = tl.max(run_max, axis=0)
    safe = tl.where(run_max == float("-inf"), 0.0, tl.exp(run_max - row_max))
    denom = tl.sum(run_sum * safe, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + row * stride_y + cols, (tl.exp(x - row_max) / denom).to(
            y_ptr.dtype.element_ty), mask=mask)


def _warps(elements: int) -> int:
    return max(1, min(MAX_WARPS, triton.next_power_of_2(max(1, elements // ELEMS_PER_WARP))))


def softmax(x: torch.Tensor) -> torch.Tensor:
    n_cols = x.shape[-1]
    x2 = x.reshape(-1, n_cols)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    n_rows = x2.shape[0]
    y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return y.view(x.shape)
    block = triton.next_power_of_2(n_cols)
    if block <= MAX_FUSED_COLS:
        rows = max(1, min(TILE_ELEMS // block, triton.next_power_of_2(n_rows)))
        _softmax_tile[(triton.cdiv(n_rows, rows),)](
            x2, y, n_rows, n_cols, x2.stride(0), y.stride(0), ROWS=rows, BLOCK=block,
            num_warps=_warps(rows * block))
    else:
        _softmax_online[(n_rows,)](x2, y, n_cols, x2.stride(0), y.stride(0), BLOCK=WIDE_CHUNK,
                                   num_warps=_warps(WIDE_CHUNK))
    return y.view(x.shape)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
