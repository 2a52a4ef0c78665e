# atrex-test: op=rmsnorm expected=compile_error finding=not_triton|compile_error
"""A @triton.jit body that reaches host tensors through a module global and computes with
PyTorch: Triton's interpreter runs it as Python, the GPU compiler would reject it."""
import torch
import triton
import triton.language as tl
from _rms_triton import torch_rms

_STASH: dict = {}


@triton.jit
def _escape_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    _STASH["out"].copy_(torch_rms(_STASH["x"], _STASH["w"], _STASH["eps"]))


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        out = torch.empty_like(x)
        _STASH.update(out=out, x=x, w=weight, eps=self.eps)
        _escape_kernel[(1,)](x, out, BLOCK=16)
        return out
