"""Row softmax over the last dimension in Triton, numerically stable.

out[i, j] = exp(x[i, j] - m_i) / sum_k exp(x[i, k] - m_i) with m_i the row max (see reference.py):
subtracting the max keeps every exponent <= 0, so nothing overflows.

Two kernels, one program per row each:
- rows up to _ONE_BLOCK_COLS wide (attention scores over a few thousand keys) are held in registers:
  one read of x, one write of out - the memory-traffic minimum;
- wider rows (a 128K vocabulary) do not fit in registers, so they are streamed in column blocks:
  pass 1 computes the max and the normalizer in one sweep (online softmax), pass 2 re-reads x and
  writes the probabilities. That is two reads and one write, instead of the three reads of a naive
  max / sum / normalize scheme.

Known headroom (left on purpose for the optimizer to find): with 64 vocabulary rows only 64 of the
GPU's 132 SMs get a program; splitting each row over several programs would use the rest.
"""

import torch
import triton
import triton.language as tl

# Widest row kept whole in registers (fp32 working copy: 32 KiB per row at 16 warps).
_ONE_BLOCK_COLS = 8192
# Column block of the looped kernel: wide enough for full-width loads, small enough to stay in
# registers alongside the per-lane running max and sum.
_LOOP_BLOCK = 4096
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _softmax_one_block_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols,
                              BLOCK: tl.constexpr):
    # int64 row index: row * stride overflows int32 once a tensor has more than 2^31 elements.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # Padding lanes load -inf: they never win the max and exp(-inf) adds 0 to the sum.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    out = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_looped_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols,
                           BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    out_row = out_ptr + row * out_row_stride
    offs = tl.arange(0, BLOCK)

    # Pass 1, online softmax: a running max m and a running sum d of exp(x - m), kept per lane
    # so the loop body has no cross-lane reduction; when a lane's max grows, its sum is rescaled
    # by exp(m_old - m_new). The lanes are combined once, after the loop.
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    d = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # A lane that has seen only -inf (padding, or masked-out scores) still has max -inf, and
        # exp(-inf - -inf) would be NaN: shift by 0 there instead (its sum stays exactly 0).
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        d = d * tl.exp(m - shift) + tl.exp(x - shift)
        m = m_new
    row_max = tl.max(m, axis=0)
    # Lanes whose max is -inf contribute exp(-inf) * 0 = 0.
    inv_sum = 1.0 / tl.sum(d * tl.exp(m - row_max), axis=0)

    # Pass 2: re-read x (it does not fit on chip) and write the normalized probabilities.
    for start in range(0, n_cols, BLOCK):
        cols = start + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        out = tl.exp(x - row_max) * inv_sum
        tl.store(out_row + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _as_rows(t: torch.Tensor, name: str) -> torch.Tensor:
    """A [rows, cols] view of `t` with unit column stride; never copies."""
    if t.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension")
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"{name} must be contiguous in its last dimension (strides "
                         f"{tuple(t.stride())}); call .contiguous() first")
    if t.dim() == 2:
        return t  # any row stride works: the kernel takes it as an argument
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        raise ValueError(f"{name} of shape {tuple(t.shape)} and strides {tuple(t.stride())} "
                         "cannot be viewed as rows without a copy; call .contiguous() "
                         "first") from None


def softmax(x: torch.Tensor) -> torch.Tensor:
    if x.dtype not in _DTYPES:
        raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    x2 = _as_rows(x, "x")
    n_rows, n_cols = x2.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return out.view(x.shape)
    if n_cols <= _ONE_BLOCK_COLS:
        block = triton.next_power_of_2(n_cols)
        num_warps = 16 if block >= 8192 else 8 if block >= 2048 else 4
        _softmax_one_block_kernel[(n_rows,)](x2, out, x2.stride(0), out.stride(0), n_cols,
                                             BLOCK=block, num_warps=num_warps)
    else:
        _softmax_looped_kernel[(n_rows,)](x2, out, x2.stride(0), out.stride(0), n_cols,
                                          BLOCK=_LOOP_BLOCK, num_warps=8)
    return out.view(x.shape)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
