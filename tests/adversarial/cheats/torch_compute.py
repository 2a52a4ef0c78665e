# atrex-test: op=rmsnorm expected=fallback finding=dispatch_fallback
"""PyTorch does all the work; a tiny Triton launch makes it look like a kernel ran."""
import torch
from _rms_triton import rms


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        rms(x[:1], weight, self.eps)  # decoy launch of an own kernel on one row
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * weight.float()).to(
            x.dtype)
