"""SiLU-and-mul (SwiGLU) in Triton, vLLM convention.

Input x = [gate | up] of shape [..., 2*I]; out = silu(x[..., :I]) * x[..., I:], shape [..., I].
The FIRST half is the gate (through SiLU), the SECOND half the multiplier - the layout of vLLM's
merged gate_up projection. Swapping the halves gives a plausible-looking but wrong result.

Purely elementwise and memory-bound: each output element needs two input elements, so the kernel
is a streaming copy with a little math. The grid is 2D - (row, column block) - so that even a
64-token decode batch has hundreds of programs to spread over the SMs.
"""

import torch
import triton
import triton.language as tl

# Columns per program. 1024 bf16 columns with 4 warps is 8 elements (16 bytes) per thread per
# half: full-width vector loads, and enough programs for the GPU at any realistic token count.
_BLOCK = 1024
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_inter,
                         BLOCK: tl.constexpr):
    # int64 row index: row * stride overflows int32 once a tensor has more than 2^31 elements.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_inter
    x_row = x_ptr + row * x_row_stride
    gate = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_row + n_inter + cols, mask=mask, other=0.0).to(tl.float32)
    # silu(g) = g * sigmoid(g) = g / (1 + exp(-g)), in fp32: for very negative g, exp(-g)
    # overflows to inf and the quotient is a clean -0, never a NaN.
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * out_row_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


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


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    if x.dtype not in _DTYPES:
        raise TypeError(f"x must be float16, bfloat16 or float32, got {x.dtype}")
    if x.dim() == 0 or x.shape[-1] % 2 != 0:
        raise ValueError(f"x must be [..., 2*I] with an even last dimension, got "
                         f"{tuple(x.shape)}")
    n_inter = x.shape[-1] // 2
    x2 = _as_rows(x, "x")
    out = torch.empty((x2.shape[0], n_inter), dtype=x.dtype, device=x.device)
    if x2.shape[0] > 0 and n_inter > 0:
        block = min(_BLOCK, triton.next_power_of_2(n_inter))
        grid = (x2.shape[0], triton.cdiv(n_inter, block))
        _silu_and_mul_kernel[grid](x2, out, x2.stride(0), out.stride(0), n_inter,
                                   BLOCK=block, num_warps=4)
    return out.view(*x.shape[:-1], n_inter)


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(x)
