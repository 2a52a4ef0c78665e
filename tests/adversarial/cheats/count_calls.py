# atrex-test: op=rmsnorm expected=incorrect finding=mismatch
"""Honest for as many calls per shape as the old runner checked (three), zeros afterwards."""
import torch
from _rms_triton import rms, token_copy

_calls = {"n": 0}


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        _calls["n"] += 1
        if _calls["n"] <= 3:
            return rms(x, weight, self.eps)
        return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)
