# atrex-test: op=rmsnorm expected=fallback finding=dispatch_fallback
"""Hides PyTorch compute inside a custom operator, next to a decoy Triton launch."""
import torch
from _rms_triton import rms


@torch.library.custom_op("atrex_cheat::rms", mutates_args=())
def _hidden(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        rms(x[:1], weight, self.eps)
        return _hidden(x, weight, self.eps)
