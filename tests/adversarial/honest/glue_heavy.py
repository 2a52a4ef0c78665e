# atrex-test: op=rmsnorm expected=pass
"""Honest, with the glue a real launcher has: reshape, contiguous, empty, view_as, a dtype check."""
import torch
from _rms_triton import rms_into


class Model(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        if x.dtype != weight.dtype:
            raise TypeError("x and weight must share a dtype")
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        out = torch.empty(rows.shape, dtype=rows.dtype, device=rows.device)
        return rms_into(rows, weight.contiguous(), out, self.eps).view_as(x)
