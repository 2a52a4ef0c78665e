# atrex-test: op=rmsnorm expected=suspicious finding=recheck_failed gpu_expected=suspicious|pass gpu_finding=recheck_failed|output_cache
"""Computes only the first of the calls a timed replay holds (_graph_copies says how it tells
them) and gives every later call a copy of that call's output: their inputs are copies of the
same values, so the copy is right while they stay equal (on a GPU, the capture records one real
call and copies from its output buffer)."""
import torch
from _graph_copies import is_copy
from _rms_triton import rms, token_copy

_first = {"out": None}


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if is_copy(x) and _first["out"] is not None:
            return token_copy(_first["out"], torch.empty_like(x), x, weight)
        out = rms(x, weight, self.eps)
        _first["out"] = out
        return out
