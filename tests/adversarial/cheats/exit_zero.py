# atrex-test: op=rmsnorm expected=runtime_error finding=runtime_error
"""Exits its process with code 0 in the middle of a call, before any answer."""
import os

import torch


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        os._exit(0)
