# atrex-test: op=rmsnorm expected=incorrect finding=input_mutation
"""Normalizes in place into its input to save an allocation, and returns the input."""
import torch
from _rms_triton import rms_into


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        return rms_into(x, weight, x, self.eps)
