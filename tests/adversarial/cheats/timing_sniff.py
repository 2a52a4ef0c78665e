# atrex-test: op=rmsnorm expected=suspicious finding=recheck_failed
"""Recognises the timing loop and graph capture from its frames and skips the work there (a
token launch keeps the launch counter happy); every call that comes from anywhere else is
honest."""
import sys

import torch
from _rms_triton import rms, token_copy


def _timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name in ("gpu_batch", "cpu_batch", "capture"):
            return True
        frame = frame.f_back
    return False


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if _timed():
            return token_copy(torch.zeros_like(x), torch.empty_like(x), x, weight)
        return rms(x, weight, self.eps)
