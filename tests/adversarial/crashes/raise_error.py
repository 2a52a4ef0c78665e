# atrex-test: op=rmsnorm expected=runtime_error
"""Raises from forward."""
import torch


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()

    def forward(self, x, weight):
        raise ValueError("unsupported hidden size")
