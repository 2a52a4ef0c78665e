"""RMSNorm in Triton: one program per row, the whole row held in registers.

out = x / sqrt(mean(x^2) + eps) * weight over the last dimension (see reference.py).

The operator is memory-bound (about 3 FLOPs per element), so the goal is to read x once and write
out once: one program loads its row a single time, reduces it, and writes the normalized row.
"""

import torch
import triton
import triton.language as tl

# Every row is one block in registers. Llama-class hidden sizes (4096-8192) fit comfortably; wider
# rows would spill registers and want a looped kernel instead, so refuse them loudly.
_MAX_COLS = 65536
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, eps,
                    BLOCK: tl.constexpr):
    # int64 row index: row * stride overflows int32 once a tensor has more than 2^31 elements.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # Accumulate in fp32: a bf16 sum of thousands of squares would lose most of its bits.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    # Masked lanes load 0 and add nothing; divide by the true width, not by BLOCK.
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    out = x * inv_rms * w
    tl.store(out_ptr + row * out_row_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _num_warps(block: int) -> int:
    # Wider rows get more warps so each thread holds a handful of elements (no register spills).
    if block >= 32768:
        return 32
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4


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


def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype not in _DTYPES:
        raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    if not weight.is_floating_point():
        raise TypeError(f"weight must be a floating-point tensor, got {weight.dtype}")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must have shape [{x.shape[-1]}] to match x's last dimension, "
                         f"got {tuple(weight.shape)}")
    if weight.device != x.device:
        raise ValueError(f"x is on {x.device} but weight is on {weight.device}")
    if not weight.is_contiguous():
        raise ValueError("weight must be contiguous")
    n_cols = x.shape[-1]
    if n_cols > _MAX_COLS:
        raise ValueError(f"rows of {n_cols} elements exceed the one-block limit of {_MAX_COLS}")
    x2 = _as_rows(x, "x")
    out = torch.empty((x2.shape[0], n_cols), dtype=x.dtype, device=x.device)
    if x2.shape[0] == 0 or n_cols == 0:
        return out.view(x.shape)
    block = triton.next_power_of_2(n_cols)
    _rmsnorm_kernel[(x2.shape[0],)](x2, weight, out, x2.stride(0), out.stride(0), n_cols, eps,
                                    BLOCK=block, num_warps=_num_warps(block))
    return out.view(x.shape)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = float(eps)

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return rmsnorm(x, weight, self.eps)
