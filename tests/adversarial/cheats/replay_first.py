# atrex-test: op=rmsnorm expected=suspicious finding=output_cache
"""Computes the first call honestly, then returns that answer for every later input."""
import torch
from _rms_triton import rms

_first: list = []


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if not _first:
            _first.append(rms(x, weight, self.eps))
        return _first[0].clone()
