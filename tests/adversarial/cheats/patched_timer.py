# atrex-test: op=rmsnorm expected=suspicious finding=patched_function isolate=yes
"""Computes honestly but makes the host clock run slow, so any wall-clock timing shrinks."""
import time

import torch
from _rms_triton import rms

_real = time.perf_counter
time.perf_counter = lambda: _real() / 10


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return rms(x, weight, self.eps)
