# atrex-test: op=rmsnorm expected=runtime_error isolate=yes
"""Dereferences a null pointer: the worker process dies with SIGSEGV."""
import ctypes

import torch


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()

    def forward(self, x, weight):
        ctypes.string_at(0)
        return x
