# atrex-test: op=rmsnorm expected=suspicious finding=output_cache
"""Caches outputs by input pointer and shape: fast when the same buffers are timed again."""
import torch
from _rms_triton import rms

_cache: dict = {}


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        key = (x.data_ptr(), weight.data_ptr(), tuple(x.shape))
        if key not in _cache:
            _cache[key] = rms(x, weight, self.eps)
        return _cache[key].clone()
