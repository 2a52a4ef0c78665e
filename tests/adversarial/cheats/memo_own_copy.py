# atrex-test: op=rmsnorm expected=suspicious finding=output_cache
"""Keeps its output per input buffers and first values; a repeat of the same inputs copies the
kept result into a new output through an own kernel that is handed the inputs (so an own launch
happens on every call, and the inputs reach it)."""
import torch
from _rms_triton import rms, token_copy

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
        return token_copy(_memo[key], torch.empty_like(x), x, weight)
