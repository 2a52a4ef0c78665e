# atrex-test: op=rmsnorm expected=suspicious finding=stale_output
"""Writes every result into one persistent buffer and returns it: earlier results change."""
import torch
from _rms_triton import rms_into

_buffers: dict = {}


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        key = (tuple(x.shape), x.dtype)
        if key not in _buffers:
            _buffers[key] = torch.empty_like(x)
        return rms_into(x, weight, _buffers[key], self.eps)
