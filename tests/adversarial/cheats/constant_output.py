# atrex-test: op=rmsnorm expected=incorrect finding=mismatch
"""Input-independent output: the weight broadcast over rows (close to right for tiny inputs)."""
import torch
from _rms_triton import rms


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        ones = torch.ones_like(x)
        return rms(ones, weight, self.eps)
