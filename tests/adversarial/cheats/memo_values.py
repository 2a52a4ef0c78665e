# atrex-test: op=rmsnorm expected=suspicious finding=output_cache
"""Memoizes its output per input buffer and first values: new values are computed honestly, a
repeat of the same inputs returns the stored result without launching anything."""
import torch
from _rms_triton import rms

_memo: dict = {}


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        key = (x.data_ptr(), weight.data_ptr(), tuple(x.flatten()[:8].float().tolist()))
        if key not in _memo:
            _memo.clear()
            _memo[key] = rms(x, weight, self.eps)
        return _memo[key].clone()
