# atrex-test: op=rmsnorm expected=fallback finding=no_own_kernel
"""Hands the computation to torch.compile (Inductor writes the kernels, not the author)."""
import torch


def _rms(x, weight, eps: float):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


_compiled = torch.compile(_rms)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return _compiled(x, weight, self.eps)
