# atrex-test: op=rmsnorm expected=runtime_error isolate=yes gpu=yes
"""A Triton kernel that writes far outside its output: an illegal memory access on the GPU."""
import torch
import triton
import triton.language as tl


@triton.jit
def _bad_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs + (1 << 40), tl.zeros((BLOCK,), tl.float32), mask=offs < n)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()

    def forward(self, x, weight):
        y = torch.empty_like(x)
        _bad_kernel[(1,)](y, x.numel(), BLOCK=128)
        return y
