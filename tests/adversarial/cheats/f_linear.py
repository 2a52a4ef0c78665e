# atrex-test: op=linear expected=fallback finding=no_own_kernel
"""cuBLAS through F.linear."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x, weight):
        return F.linear(x, weight)
