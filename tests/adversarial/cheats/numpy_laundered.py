# atrex-test: op=rmsnorm expected=fallback finding=host_compute
"""Copies the inputs out through an own kernel first (so its host code reads whatever the own
kernels read, in every replay), computes with numpy from that copy, and copies the result into
the output with an own kernel."""
import numpy as np
import torch
from _rms_triton import token_copy


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        xs = token_copy(x, torch.empty_like(x), x, weight)
        ws = token_copy(weight, torch.empty_like(weight), x, weight)
        xn, wn = xs.float().cpu().numpy(), ws.float().cpu().numpy()
        result = xn / np.sqrt((xn * xn).mean(-1, keepdims=True) + self.eps) * wn
        return token_copy(torch.from_numpy(result).to(x.device), torch.empty_like(x), x, weight)
